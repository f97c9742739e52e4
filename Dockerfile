# The portal's image: three stages, so the final one has no compilers, npm or pip caches.
# Build:  docker build -t registry.example.com/platform/aifactory-portal:0.1.0 .
# Push:   docker push registry.example.com/platform/aifactory-portal:0.1.0

# 1. Front-end libraries from the npm registry, pinned by package-lock.json (never a CDN).
FROM node:20.19-bookworm-slim AS assets
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && mkdir -p /out/vendor && \
    cp node_modules/chart.js/dist/chart.umd.min.js node_modules/chart.js/dist/chart.umd.min.js.map \
       node_modules/chart.js/LICENSE.md /out/vendor/

# 2. Python dependencies into a virtualenv, and the static files collected (hashed names for
#    the production manifest storage) — at build time, so pods can run read-only.
FROM python:3.11.14-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /venv
WORKDIR /app
COPY pyproject.toml requirements.lock ./
RUN /venv/bin/pip install -c requirements.lock .
COPY . .
COPY --from=assets /out/vendor /app/build/vendor/vendor
RUN PORTAL_MODE=production SECRET_KEY=build-only-not-a-secret-build-only-not-a-secret-xx \
    ALLOWED_HOSTS=build DATABASE_URL=sqlite:////tmp/build.sqlite3 \
    CELERY_BROKER_URL=redis://build:6379/0 STATIC_ROOT=/app/static \
    /venv/bin/python manage.py collectstatic --noinput && rm -rf /app/var /app/test-artifacts

# 3. The runtime: the venv, the code and the collected static files; a non-root user.
FROM python:3.11.14-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/venv/bin:$PATH \
    STATIC_ROOT=/app/static PORTAL_VAR_DIR=/tmp/portal
# DejaVu: statement PDFs print every tenant's name, not only Latin-1 ones.
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends fonts-dejavu-core && \
    rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 portal && \
    useradd --system --uid 10001 --gid portal --no-create-home portal
COPY --from=build /venv /venv
COPY --from=build /app /app
WORKDIR /app
USER 10001:10001
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000"]
