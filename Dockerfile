# Front-end libraries from the npm registry, pinned by package-lock.json (never a CDN).
FROM node:20-bookworm-slim AS assets
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && mkdir -p /out/vendor && \
    cp node_modules/chart.js/dist/chart.umd.min.js node_modules/chart.js/dist/chart.umd.min.js.map \
       node_modules/chart.js/LICENSE.md /out/vendor/

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PORTAL_VAR_DIR=/app/var STATIC_ROOT=/app/var/static
WORKDIR /app
COPY pyproject.toml requirements.lock ./
COPY . .
COPY --from=assets /out/vendor /app/build/vendor/vendor
RUN pip install --no-cache-dir -c requirements.lock . && useradd --system portal && \
    mkdir -p /app/var && chown -R portal /app/var
USER portal
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000"]
