# The service image used by docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY digest_stream ./digest_stream
RUN pip install --no-cache-dir .
USER nobody
ENTRYPOINT ["digest-stream"]
CMD ["run"]
