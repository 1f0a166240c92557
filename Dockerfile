# The service image used by docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY digest_stream ./digest_stream
RUN pip install --no-cache-dir .
USER nobody
# In a container the probes and /metrics come from outside: listen on every interface (the
# service's own default is loopback). The port stays off unless DIGEST_STREAM_METRICS_PORT is set.
ENV DIGEST_STREAM_METRICS_HOST=0.0.0.0
ENTRYPOINT ["digest-stream"]
CMD ["run"]
