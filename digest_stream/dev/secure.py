"""The secured flavour of the local stack: what production clusters look like.

A second KRaft broker with a SASL_SSL listener (SCRAM-SHA-512 users made at format time), the
StandardAuthorizer with allow.everyone.if.no.acl.found=false, `admin` as the one super user and
prefixed ACLs (ops/acls.py) for the service's user `digest-stream`; and a TLS-only Redis with
the README's ACL user (`digest-stream`, namespace `d`, no FUNCTION LOAD) and an `admin` user
that loads the Functions library. Certificates (a CA, a broker and a Redis server certificate
for 127.0.0.1/localhost) are made with openssl at start; passwords are generated per stack and
kept in `<stack dir>/secure/credentials.json` (mode 600). Everything it needs to be reached,
`stack.json` next to it, is what `dev env --secure` prints and the secured tests read.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from digest_stream.dev.kafka import (
    KAFKA_READY_TIMEOUT,
    broker_down,
    broker_launch,
    broker_properties,
    broker_wait,
)
from digest_stream.dev.process import (
    HOST,
    StackError,
    port_open,
    require,
    say,
    stack_dir,
    stop_pid,
)
from digest_stream.dev.redis import redis_start
from digest_stream.ops.acls import RUN_ROLES, Names, acls
from digest_stream.store.redis.acl import acl_rules

SECURE_KAFKA_PORT = int(os.environ.get("DIGEST_STREAM_DEV_SECURE_KAFKA_PORT", "19192"))
SECURE_CONTROLLER_PORT = SECURE_KAFKA_PORT + 1
SECURE_REDIS_PORT = int(os.environ.get("DIGEST_STREAM_DEV_SECURE_REDIS_PORT", "16380"))
ADMIN = "admin"
SERVICE = "digest-stream"
#: The service user's ACLs are prefixed on these: every topic the settings name by default
#: starts with "digests.", every group (the ingest's, delivery's, tail's) with "digest-stream".
#: Tests name their topics digests.<unique>.* and their groups digest-stream-<unique>.
TOPIC_PREFIX = "digests."
GROUP_PREFIX = "digest-stream"
#: What `dev env` exports when the secured stack runs: the path of stack.json (no secret in
#: the environment of every command of the shell).
SECURE_ENV = "DIGEST_STREAM_DEV_SECURE_STACK"
#: Every command the stack grants its service user: all roles and commands of ops/acls.py.
SERVICE_USES = (*RUN_ROLES, "topics-create", "flush-cancel", "replay", "tail")
CERT_DAYS = 30
#: The help of `dev up --secure` and `dev env --secure` (the secured stack's words are its own).
UP_HELP = (
    "Also start a secured Kafka (SASL_SSL, SCRAM, ACLs) and a TLS-only Redis with ACL "
    "users (ports 19192 and 16380; `dev env --secure` prints their settings)."
)
ENV_HELP = (
    "The settings of the secured stack instead: SASL_SSL Kafka as the service's user, "
    "rediss:// Redis as the README's ACL user, the library loaded by admin."
)


def home() -> Path:
    """Where the secured parts keep their certificates, configs, logs and data."""
    return stack_dir() / "secure"


def credentials() -> dict[str, str]:
    """The stack's passwords, generated at its first start (kept until `dev down`)."""
    path = home() / "credentials.json"
    if path.exists():
        stored: dict[str, str] = json.loads(path.read_text())
        return stored
    made = {name: secrets.token_urlsafe(18) for name in ("kafka-admin", "kafka-service",
                                                          "redis-admin", "redis-service",
                                                          "keystore")}  # fmt: skip
    home().mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(json.dumps(made))
    return made


# ------------------------------------------------------------------ certificates


def _openssl(*args: str) -> None:
    openssl = require("openssl", "install openssl (apt-get install openssl)")
    done = subprocess.run([openssl, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {done.stderr.strip()[-300:]}")


def certificates() -> Path:
    """A CA and server certificates for 127.0.0.1/localhost (kafka, redis); their folder."""
    certs = home() / "certs"
    if (certs / ".complete").exists():
        return certs
    certs.mkdir(parents=True, exist_ok=True)
    certs.chmod(0o700)
    say(f"making a CA and server certificates in {certs}")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(CERT_DAYS),
        "-keyout", str(certs / "ca.key"), "-out", str(certs / "ca.pem"),
        "-subj", "/CN=digest-stream dev CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    ext = certs / "server.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        f"subjectAltName=IP:{HOST},DNS:localhost\n"
    )
    for name in ("kafka", "redis", "client"):
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", str(certs / f"{name}.key"), "-out", str(certs / f"{name}.csr"),
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(certs / f"{name}.csr"), "-days", str(CERT_DAYS),
            "-CA", str(certs / "ca.pem"), "-CAkey", str(certs / "ca.key"), "-CAcreateserial",
            "-extfile", str(ext), "-out", str(certs / f"{name}.pem"),
        )  # fmt: skip
    # The broker reads its key from a PKCS12 store (Java's own format, no keytool needed).
    _openssl(
        "pkcs12", "-export", "-name", "kafka",
        "-in", str(certs / "kafka.pem"), "-inkey", str(certs / "kafka.key"),
        "-out", str(certs / "kafka.p12"), "-passout", f"pass:{credentials()['keystore']}",
    )  # fmt: skip
    (certs / ".complete").write_text("")
    return certs


# ------------------------------------------------------------------ kafka


def _jaas(module: str, user: str, password: str, extra: str = "") -> str:
    return f'{module} required username="{user}" password="{password}"{extra};'


def kafka_properties(data_dir: Path) -> str:
    """server.properties of the secured broker: SASL_SSL for clients, authorizer, ACLs only."""
    creds, certs = credentials(), home() / "certs"
    admin_pw = creds["kafka-admin"]
    return broker_properties(
        data_dir,
        SECURE_CONTROLLER_PORT,
        [
            f"listeners=SASL_SSL://{HOST}:{SECURE_KAFKA_PORT},"
            f"CONTROLLER://{HOST}:{SECURE_CONTROLLER_PORT}",
            f"advertised.listeners=SASL_SSL://{HOST}:{SECURE_KAFKA_PORT}",
            "inter.broker.listener.name=SASL_SSL",
            # The controller listener authenticates too (SASL PLAIN on loopback: SCRAM users
            # live in the metadata the controller serves, so they cannot guard it), as admin.
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            "sasl.mechanism.controller.protocol=PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
            "listener.name.controller.plain.sasl.jaas.config="
            + _jaas(
                "org.apache.kafka.common.security.plain.PlainLoginModule",
                ADMIN,
                admin_pw,
                f' user_{ADMIN}="{admin_pw}"',
            ),
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
            + _jaas("org.apache.kafka.common.security.scram.ScramLoginModule", ADMIN, admin_pw),
            "ssl.keystore.type=PKCS12",
            f"ssl.keystore.location={certs / 'kafka.p12'}",
            f"ssl.keystore.password={creds['keystore']}",
            f"ssl.key.password={creds['keystore']}",
            # The broker is a client of itself (inter-broker): it trusts the stack's CA.
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={certs / 'ca.pem'}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found=false",
            f"super.users=User:{ADMIN}",
        ],
    )


def kafka_client_config(user: str = SERVICE) -> dict[str, Any]:
    """librdkafka properties of a client of the secured broker, as this user."""
    password = credentials()["kafka-admin" if user == ADMIN else "kafka-service"]
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(home() / "certs" / "ca.pem"),
    }


def _admin_client() -> Any:
    from confluent_kafka.admin import AdminClient

    config: dict[str, Any] = {"bootstrap.servers": f"{HOST}:{SECURE_KAFKA_PORT}", "log_level": 0}
    return AdminClient(config | kafka_client_config(ADMIN))


def kafka_answers() -> bool:
    """Readiness: the broker answers an authenticated metadata request over TLS."""
    if not port_open(SECURE_KAFKA_PORT):
        return False
    try:
        metadata = _admin_client().list_topics(timeout=5)  # TLS and SCRAM handshakes first
    except Exception:
        return False
    return bool(metadata.brokers)


def service_acls() -> list[Any]:
    """The service user's ACL bindings: every use of ops/acls.py, on the stack's prefixes."""
    # confluent_kafka.admin re-exports these without __all__ (mypy --strict rejects that).
    from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
    from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

    names = Names(
        events=TOPIC_PREFIX, schedule=TOPIC_PREFIX, output=TOPIC_PREFIX, dlq=TOPIC_PREFIX,
        group=GROUP_PREFIX, delivery_group=GROUP_PREFIX, tail_group=GROUP_PREFIX,
        pattern="prefixed",
    )  # fmt: skip
    return [
        AclBinding(
            ResourceType[acl.resource.upper()],
            acl.name,
            ResourcePatternType.PREFIXED,
            f"User:{SERVICE}",
            "*",
            AclOperation[operation.upper()],
            AclPermissionType.ALLOW,
        )
        for acl in acls(names, SERVICE_USES)
        for operation in acl.operations
    ]


def secure_kafka_launch() -> int | None:
    """Format (with the SCRAM users) and start the secured broker unless it runs."""
    certificates()
    creds = credentials()
    scram = [
        f"SCRAM-SHA-512=[name={ADMIN},password={creds['kafka-admin']}]",
        f"SCRAM-SHA-512=[name={SERVICE},password={creds['kafka-service']}]",
    ]
    return broker_launch(
        home() / "kafka",
        "secured kafka",
        SECURE_KAFKA_PORT,
        kafka_properties,
        scram=scram,  # on the format's command line for its seconds: a loopback dev stack
    )


def secure_kafka_ready() -> None:
    """Wait for the secured broker, then grant the service user its ACLs (idempotent)."""
    broker_wait(home() / "kafka", "secured kafka", kafka_answers)
    bindings = service_acls()
    admin = _admin_client()  # held while its futures resolve (a dropped client fails them)
    for binding, future in admin.create_acls(bindings).items():
        try:
            future.result(timeout=KAFKA_READY_TIMEOUT)
        except Exception as exc:
            raise StackError(f"cannot create the ACL {binding}: {exc}") from exc
    say(f"secured kafka: {len(bindings)} prefixed ACLs for User:{SERVICE}")


# ------------------------------------------------------------------ redis


def redis_url(user: str = SERVICE) -> str:
    """The rediss:// URL of the TLS Redis as this user (the CA as a URL parameter)."""
    password = credentials()["redis-admin" if user == ADMIN else "redis-service"]
    ca = home() / "certs" / "ca.pem"
    return f"rediss://{user}:{password}@{HOST}:{SECURE_REDIS_PORT}/0?ssl_ca_certs={ca}"


def redis_answers() -> bool:
    """Readiness: the admin user gets a PONG over TLS."""
    from digest_stream.store.redis.client import answers

    return answers(redis_url(ADMIN))


def _redis_config() -> Path:
    creds, certs, where = credentials(), home() / "certs", home() / "redis"
    where.mkdir(parents=True, exist_ok=True)
    service = acl_rules("d", load_library=False)  # the README's line, namespace d
    config = where / "redis.conf"
    config.touch(mode=0o600)
    config.write_text(
        "\n".join(
            [
                "port 0",
                f"tls-port {SECURE_REDIS_PORT}",
                f"tls-cert-file {certs / 'redis.pem'}",
                f"tls-key-file {certs / 'redis.key'}",
                f"tls-ca-cert-file {certs / 'ca.pem'}",
                # A client certificate is checked when given (mTLS tests), not required.
                "tls-auth-clients optional",
                "user default off",
                f"user {ADMIN} on >{creds['redis-admin']} ~* &* +@all",
                f"user {SERVICE} on >{creds['redis-service']} resetkeys {' '.join(service)}",
                "",
            ]
        )
    )
    return config


def secure_store_up() -> None:
    """The secured store: start the TLS-only Redis and load the Functions library as admin."""
    certificates()
    redis_start(
        "secure/redis",
        SECURE_REDIS_PORT,
        [],
        ping=redis_answers,
        config=_redis_config(),
    )
    load_library()


def load_library() -> None:
    """Load (or replace) the Functions library as admin, as production recommends."""
    from digest_stream.store.redis.client import load_library as load

    load(redis_url(ADMIN))
    say("secured redis: Functions library loaded by admin")


# ------------------------------------------------------------------ the whole


def secure_running() -> bool:
    """Whether both secured parts answer (False at once when they never started)."""
    return stack_file().exists() and kafka_answers() and redis_answers()


def describe() -> dict[str, Any]:
    """Everything a client or test needs to reach the secured stack (stack.json's content)."""
    return {
        "kafka_bootstrap_servers": f"{HOST}:{SECURE_KAFKA_PORT}",
        "kafka_config": kafka_client_config(SERVICE),
        "kafka_admin_config": kafka_client_config(ADMIN),
        "redis_url": redis_url(SERVICE),
        "redis_admin_url": redis_url(ADMIN),
        "ca": str(home() / "certs" / "ca.pem"),
        "client_cert": str(home() / "certs" / "client.pem"),
        "client_key": str(home() / "certs" / "client.key"),
        "topic_prefix": TOPIC_PREFIX,
        "group_prefix": GROUP_PREFIX,
        "service_user": SERVICE,
        "admin_user": ADMIN,
    }


def stack_file() -> Path:
    """stack.json: written at `dev up --secure`, read by `dev env --secure` and the tests."""
    return home() / "stack.json"


def secure_up_finish() -> None:
    """Record stack.json (mode 600: it holds the passwords)."""
    path = stack_file()
    path.touch(mode=0o600)
    path.write_text(json.dumps(describe(), indent=2))


def secure_exports() -> list[str]:
    """Shell exports that point the service's settings at the secured stack."""
    info = describe()
    return [
        f"export DIGEST_STREAM_KAFKA_BOOTSTRAP_SERVERS={info['kafka_bootstrap_servers']}",
        f"export DIGEST_STREAM_KAFKA_CONFIG='{json.dumps(info['kafka_config'])}'",
        f"export DIGEST_STREAM_REDIS_URL='{info['redis_url']}'",
        "export DIGEST_STREAM_REDIS_LOAD_LIBRARY=false",
    ]


def secure_down() -> None:
    """Stop the secured broker and Redis; remove their data, certificates and passwords."""
    broker_down(home() / "kafka", "secured kafka")
    stop_pid(home() / "redis" / "redis.pid", f":{SECURE_REDIS_PORT}", "secured redis")
    shutil.rmtree(home(), ignore_errors=True)
