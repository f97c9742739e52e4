"""A real Keycloak from Maven Central for the sso tier, started once per test session."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from .procs import CACHE_ROOT, ManagedProcess, free_port, wait_http_ok

KEYCLOAK_VERSION = os.environ.get("PORTAL_TEST_KEYCLOAK_VERSION", "26.7.3")
REALM_FILE = Path(__file__).resolve().parents[2] / "deploy" / "keycloak" / "aifactory-realm.json"
ADMIN_USER, ADMIN_PASSWORD = "kcadmin", "kcadmin-test-password"


def java_home() -> str:
    for candidate in ("/usr/lib/jvm/temurin-25-jdk-amd64", "/usr/lib/jvm/java-21-openjdk-amd64",
                      "/usr/lib/jvm/java-17-openjdk-amd64"):
        if Path(candidate, "bin", "java").exists():
            return candidate
    raise RuntimeError("no JDK found for Keycloak (Temurin 25 or OpenJDK 17+)")


def ensure_distribution(version: str = KEYCLOAK_VERSION) -> Path:
    """Download the distribution zip from Maven Central once; unzip it into the cache."""
    home = CACHE_ROOT / "keycloak" / f"keycloak-{version}"
    if (home / "bin" / "kc.sh").exists():
        return home
    # Copied out of Maven's local repository into our cache, wherever that repository is
    # (Maven takes it from Java's user.home or settings.xml, not from $HOME).
    downloads = CACHE_ROOT / "keycloak" / "downloads"
    zipped = downloads / f"keycloak-quarkus-dist-{version}.zip"
    if not zipped.exists():
        subprocess.run(["mvn", "-q", "dependency:copy",
                        f"-Dartifact=org.keycloak:keycloak-quarkus-dist:{version}:zip",
                        f"-DoutputDirectory={downloads}"], check=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["unzip", "-q", "-o", str(zipped), "-d", str(home.parent)], check=True)
    return home


def extra_realm() -> dict:
    """A second realm: its tokens have another issuer and other keys (wrong-issuer tests)."""
    return {
        "realm": "elsewhere", "enabled": True, "sslRequired": "none",
        "clients": [{"clientId": "aifactory-cli", "publicClient": True, "enabled": True,
                     "standardFlowEnabled": False, "directAccessGrantsEnabled": True,
                     "protocolMappers": [{"name": "aud", "protocol": "openid-connect",
                                          "protocolMapper": "oidc-audience-mapper",
                                          "config": {"included.client.audience":
                                                     "aifactory-portal",
                                                     "access.token.claim": "true"}}]}],
        "users": [{"username": "stranger", "enabled": True, "email": "s@example.com",
                   "emailVerified": True, "firstName": "S", "lastName": "T",
                   "credentials": [{"type": "password", "value": "demo"}]}],
    }


class KeycloakServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self.proc: ManagedProcess | None = None
        self.startup_seconds = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def realm_url(self, realm: str = "aifactory") -> str:
        return f"{self.url}/realms/{realm}"

    def start(self) -> KeycloakServer:
        started = time.monotonic()
        dist = ensure_distribution()
        # A private copy of the small parts that hold state, so runs never share a database.
        home = self.workdir / "keycloak"
        home.mkdir(parents=True)
        # bin and conf are copied (kc.sh finds its home from its own real path); the large
        # read-only parts are linked.
        for part in ("lib", "providers", "themes", "version.txt"):
            (home / part).symlink_to(dist / part, target_is_directory=(dist / part).is_dir())
        for part in ("bin", "conf"):
            shutil.copytree(dist / part, home / part)
        imports = home / "data" / "import"
        imports.mkdir(parents=True)
        shutil.copy(REALM_FILE, imports / "aifactory-realm.json")
        (imports / "elsewhere-realm.json").write_text(json.dumps(extra_realm()))
        self.port, management = free_port(), free_port()
        env = {**os.environ, "JAVA_HOME": java_home(),
               "KC_BOOTSTRAP_ADMIN_USERNAME": ADMIN_USER,
               "KC_BOOTSTRAP_ADMIN_PASSWORD": ADMIN_PASSWORD,
               "JAVA_OPTS_KC_HEAP": "-Xms256m -Xmx768m"}
        self.proc = ManagedProcess(
            "keycloak",
            [str(home / "bin" / "kc.sh"), "start-dev", f"--http-port={self.port}",
             f"--http-management-port={management}", "--http-host=127.0.0.1",
             "--health-enabled=true", "--import-realm", "--cache=local"],
            log_path=self.workdir / "keycloak.log", env=env, cwd=home,
        ).start()
        # A ceiling, not a target: on a cold machine the tests share the CPU with the
        # background builds at a lower priority (scripts/test.sh), and Keycloak's first start
        # (its build step) is the heaviest thing they start.
        wait_http_ok(self.proc, f"http://127.0.0.1:{management}/health/ready", timeout=600,
                     what="Keycloak", interval=1)
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.stop(timeout=30)

    # -- admin API helpers for tests

    def admin_token(self) -> str:
        import requests

        r = requests.post(f"{self.url}/realms/master/protocol/openid-connect/token", data={
            "grant_type": "password", "client_id": "admin-cli", "username": ADMIN_USER,
            "password": ADMIN_PASSWORD}, timeout=10)
        r.raise_for_status()
        return r.json()["access_token"]

    def admin(self, method: str, path: str, **kw):
        import requests

        r = requests.request(method, f"{self.url}/admin/realms/aifactory{path}", headers={
            "Authorization": f"Bearer {self.admin_token()}"}, timeout=10, **kw)
        r.raise_for_status()
        return r.json() if r.content else None

    def password_token(self, username: str, password: str = "demo", *,
                       realm: str = "aifactory", client: str = "aifactory-cli") -> str:
        import requests

        r = requests.post(f"{self.url}/realms/{realm}/protocol/openid-connect/token", data={
            "grant_type": "password", "client_id": client, "username": username,
            "password": password, "scope": "openid"}, timeout=10)
        r.raise_for_status()
        return r.json()["access_token"]
