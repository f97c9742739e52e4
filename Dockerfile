FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PORTAL_VAR_DIR=/app/var STATIC_ROOT=/app/var/static
WORKDIR /app
COPY pyproject.toml requirements.lock ./
COPY . .
RUN pip install --no-cache-dir -c requirements.lock . && useradd --system portal && \
    mkdir -p /app/var && chown -R portal /app/var
USER portal
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000"]
