"""Every fenced block of README.md and docs/ runs as a test (Sybil): `pytest README.md docs`.

Each document gets a fresh temporary directory (its working directory while it runs), an event loop
and a `Soniq` that points the documented URLs at the test servers: `postgresql://...` at the test
PostgreSQL and `redis://...` at the test Redis, each under a namespace of its own; `sqlite:///...`
at a file in the temporary directory. A document that needs a server that is down is skipped, except
with CI=true, where that fails. How each language is run is in `EVALUATORS`; a block in any other
language fails, so nothing can sit in the docs unchecked. A block that must not run carries
`<!-- skip: next "why" -->` just above it.

The blocks of one document share a namespace, so run this without pytest-xdist (no `-n`).
"""

from __future__ import annotations

import ast
import asyncio
import configparser
import importlib.metadata
import inspect
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer
from sybil.parsers.markdown.skip import SkipParser

ROOT = Path(__file__).resolve().parent
PG_URL = os.environ.get("SONIQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SONIQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
ENV_KEY = "__soniq_doc_env__"

# Modules the documented commands name (`--jobs-modules myapp.jobs`), as a reader's project would have them.
FIXTURE_MODULES = {
    "myapp/jobs.py": """
from soniq import Soniq

app = Soniq()


@app.job(name="myapp.send_welcome_email", queue="emails")
async def send_welcome_email(user_id: int) -> None: ...
""",
    "billing/jobs.py": """
from soniq import Soniq

app = Soniq()


@app.job(name="billing.send_invoice", queue="invoices")
async def send_invoice(invoice_id: int) -> None: ...
""",
}

DOCKERFILE_INSTRUCTIONS = frozenset(
    {"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL", "ONBUILD"}
    | {"RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"}
)


def _cli_has(command: str) -> bool:
    done = subprocess.run([sys.executable, "-m", "soniq", *command.split(), "--help"], capture_output=True, timeout=60)
    return done.returncode == 0


def _feature_present(feature: str) -> bool:
    import soniq
    from soniq.settings import Settings

    checks: dict[str, Callable[[], bool]] = {
        "enqueue_sync": lambda: hasattr(soniq.Soniq, "enqueue_sync"),
        "Permanent": lambda: hasattr(soniq, "Permanent"),
        "wave-2 settings": lambda: all(
            name in Settings.__dataclass_fields__
            for name in ("unknown_job_timeout", "allow_no_jobs", "max_result_bytes", "cancel_grace_seconds")
        ),
        "include_results": lambda: "include_results" in inspect.signature(soniq.Soniq.list_jobs).parameters,
        "soniq inspect": lambda: _cli_has("inspect"),
        "soniq recover --stale-after": lambda: (
            "--stale-after"
            in subprocess.run(
                [sys.executable, "-m", "soniq", "recover", "--help"], capture_output=True, text=True, timeout=60
            ).stdout
        ),
    }
    return checks[feature]()


def pending(feature: str) -> str | None:
    """For `<!-- skip: next pending("...") -->`: skip a block whose feature another branch brings,
    until it is merged; from then on the block runs."""
    if _feature_present(feature):
        return None
    return f"documents {feature}, which is not merged into this tree yet"


def _reachable(kind: str) -> str | None:
    """None when the test server answers, else why not."""

    async def probe() -> None:
        if kind == "postgresql":
            import asyncpg

            conn = await asyncio.wait_for(asyncpg.connect(PG_URL), 5)
            await conn.close()
        else:
            import redis.asyncio as aioredis

            client = aioredis.from_url(REDIS_URL)
            try:
                await asyncio.wait_for(client.ping(), 5)
            finally:
                await client.aclose()

    try:
        asyncio.run(probe())
    except Exception as exc:
        return f"{kind} test server is not reachable ({exc}); these docs need it"
    return None


_SERVERS: dict[str, str | None] = {}


def require_server(kind: str) -> None:
    if kind not in _SERVERS:
        _SERVERS[kind] = _reachable(kind)
    reason = _SERVERS[kind]
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@dataclass
class DocEnvironment:
    """What one document's blocks share: a directory, a loop, the apps they built."""

    directory: Path
    loop: asyncio.AbstractEventLoop
    namespace: str = field(default_factory=lambda: "doc_" + uuid.uuid4().hex[:10])
    apps: list[Any] = field(default_factory=list)
    servers: set[str] = field(default_factory=set)
    skipped: str | None = None

    def target(self, url: str | None, options: dict[str, Any] | None) -> tuple[str | None, dict[str, Any] | None]:
        """The test URL and backend options standing in for a documented URL."""
        if url is None or "://" not in url:
            return url, options
        scheme = urlsplit(url).scheme
        if scheme in ("postgresql", "postgres"):
            require_server("postgresql")
            self.servers.add("postgresql")
            return PG_URL, {**(options or {}), "namespace": self.namespace}
        if scheme in ("redis", "rediss"):
            require_server("redis")
            self.servers.add("redis")
            return REDIS_URL, {**(options or {}), "namespace": self.namespace}
        if scheme == "sqlite":
            return f"sqlite:///{self.directory / (Path(urlsplit(url).path).name or 'soniq.db')}", options
        return url, options

    def run(self, awaitable: Any) -> Any:
        return self.loop.run_until_complete(awaitable)


def _doc_soniq(env: DocEnvironment, original: type) -> type:
    class DocSoniq(original):  # type: ignore[misc]
        def __init__(self, database_url: str | None = None, *args: Any, **kwargs: Any) -> None:
            url, options = env.target(database_url, kwargs.pop("backend_options", None))
            if options is not None:
                kwargs["backend_options"] = options
            super().__init__(url, *args, **kwargs)
            env.apps.append(self)

    DocSoniq.__name__ = DocSoniq.__qualname__ = "Soniq"
    return DocSoniq


def setup(namespace: dict[str, Any]) -> None:
    import soniq

    directory = Path(tempfile.mkdtemp(prefix="soniq-doc-"))
    for relative, text in FIXTURE_MODULES.items():
        path = directory / "fixtures" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text, encoding="utf-8")
    env = DocEnvironment(directory=directory, loop=asyncio.new_event_loop())
    namespace[ENV_KEY] = env
    namespace["__name__"] = "__main__"
    namespace["pending"] = pending
    namespace["__soniq_saved__"] = (soniq.Soniq, os.getcwd(), os.environ.pop("SONIQ_DATABASE_URL", None))
    soniq.Soniq = _doc_soniq(env, soniq.Soniq)  # type: ignore[misc, assignment]
    os.chdir(directory)


def teardown(namespace: dict[str, Any]) -> None:
    import soniq

    env: DocEnvironment = namespace[ENV_KEY]
    original, cwd, url = namespace["__soniq_saved__"]
    try:
        for app in env.apps:
            try:
                env.run(app.close())
            except Exception:
                pass  # an app a block closed on its own loop (asyncio.run) is already closed
        for kind in env.servers:
            server = PG_URL if kind == "postgresql" else REDIS_URL
            cleaner = original(server, backend_options={"namespace": env.namespace})

            async def drop(app: Any = cleaner) -> None:
                try:
                    await app.backend.connect()
                    await app.backend.drop_schema()
                finally:
                    await app.close()

            env.run(drop())
    finally:
        env.loop.close()
        soniq.Soniq = original  # type: ignore[misc]
        os.chdir(cwd)
        if url is not None:
            os.environ["SONIQ_DATABASE_URL"] = url


def _env(example: Example) -> DocEnvironment:
    env: DocEnvironment = example.namespace[ENV_KEY]
    if env.skipped:
        pytest.skip(env.skipped)
    return env


def evaluate_python(example: Example) -> None:
    """Run the block in the document's namespace; top-level `await` runs on the document's loop,
    as in `python -m asyncio`, so the guide's fragments read as they are typed."""
    env = _env(example)
    source = "\n" * (example.line + example.parsed.line_offset) + str(example.parsed)
    code = compile(source, example.path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    try:
        result = eval(code, example.namespace)
        if inspect.iscoroutine(result):
            env.run(result)
    except pytest.skip.Exception as exc:
        env.skipped = str(exc)  # the blocks after this one build on it
        raise
    finally:
        example.namespace.pop("__builtins__", None)


def _commands(text: str, prompted: bool) -> Iterable[str]:
    joined = re.sub(r"\\\n\s*", " ", text)
    for line in joined.splitlines():
        if prompted:
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            yield line


def _run_command(env: DocEnvironment, command: str) -> None:
    argv = shlex.split(command)
    if argv[:2] == ["pip", "install"]:
        missing = []
        for name in (a for a in argv[2:] if not a.startswith("-")):
            try:
                importlib.metadata.distribution(re.split(r"[<>=!\[]", name)[0])
            except importlib.metadata.PackageNotFoundError:
                missing.append(name)
        assert not missing, f"{command!r} names distributions that do not exist here: {missing}"
        return
    if argv[0] != "soniq":
        raise AssertionError(
            f"the doc tests do not run {command!r}: run it through an allowed command or put "
            '<!-- skip: next "why" --> above the block'
        )
    environ = {
        **os.environ,
        "SONIQ_DATABASE_URL": f"sqlite:///{env.directory / 'cli.db'}",
        "SONIQ_OBSERVERS": "",
        "PYTHONPATH": os.pathsep.join([str(env.directory / "fixtures"), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, "-m", "soniq", *argv[1:]]
    if "worker" in argv and "--run-once" not in argv:
        _run_worker_until_started(argv, environ, env.directory, command)
        return
    done = subprocess.run(argv, env=environ, cwd=env.directory, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n{done.stdout}{done.stderr}"


def _run_worker_until_started(argv: list[str], environ: dict[str, str], cwd: Path, command: str) -> None:
    """A documented worker runs until it says it started, then must stop cleanly on SIGTERM."""
    log = cwd / f"worker-{uuid.uuid4().hex[:6]}.log"
    with open(log, "wb") as handle:
        worker = subprocess.Popen(argv, env=environ, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "started:" not in log.read_text(errors="replace"):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{command!r} did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(30)
        assert code == 0, f"{command!r} exited {code} after SIGTERM:\n{log.read_text(errors='replace')}"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)


def shell(prompted: bool) -> Callable[[Example], None]:
    def evaluate(example: Example) -> None:
        env = _env(example)
        for command in _commands(str(example.parsed), prompted):
            _run_command(env, command)

    return evaluate


def evaluate_sql(example: Example) -> None:
    """Run the statement on the test PostgreSQL, in a schema set up by Soniq, then roll it back."""
    import asyncpg

    import soniq

    env = _env(example)
    app = soniq.Soniq("postgresql://docs")
    sql = str(example.parsed)
    placeholders = {int(n) for n in re.findall(r"\$(\d+)", sql)}

    async def run() -> None:
        await app.setup()
        conn = await asyncpg.connect(PG_URL)
        try:
            await conn.execute(f"SET search_path TO {env.namespace}")
            transaction = conn.transaction()
            await transaction.start()
            try:
                await conn.execute(sql, *([None] * max(placeholders, default=0)))
            finally:
                await transaction.rollback()
        finally:
            await conn.close()

    env.run(run())


def evaluate_toml(example: Example) -> None:
    tomllib.loads(str(example.parsed))


def evaluate_ini(example: Example) -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string(str(example.parsed))
    assert parser.sections(), "an ini block with no [section]"


def evaluate_yaml(example: Example) -> None:
    import yaml  # type: ignore[import-untyped]

    assert yaml.safe_load(str(example.parsed)) is not None


def evaluate_dockerfile(example: Example) -> None:
    for line in str(example.parsed).splitlines():
        word = line.split(" ", 1)[0]
        if word and not word.startswith("#"):
            assert word in DOCKERFILE_INSTRUCTIONS, f"not a Dockerfile instruction: {line!r}"


def evaluate_text(example: Example) -> None:
    """Diagrams, log lines and file trees: read, not run."""


EVALUATORS: dict[str, Callable[[Example], None]] = {
    "python": evaluate_python,
    "console": shell(prompted=True),
    "bash": shell(prompted=False),
    "sql": evaluate_sql,
    "toml": evaluate_toml,
    "ini": evaluate_ini,
    "yaml": evaluate_yaml,
    "dockerfile": evaluate_dockerfile,
    "text": evaluate_text,
}


class FencedBlockParser:
    """Every fenced block, dispatched on its language; an unknown or missing language fails."""

    lexer = RawFencedCodeBlockLexer(
        info_pattern=re.compile(r"(?P<language>[^\n]*)$\n", re.MULTILINE),
        mapping={"language": "language", "source": "source"},
    )

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.lexer(document):
            language = str(region.lexemes["language"]).strip()
            region.parsed = region.lexemes["source"]
            region.evaluator = EVALUATORS.get(language) or _unknown(language)
            yield region


def _unknown(language: str) -> Callable[[Example], None]:
    def evaluate(example: Example) -> None:
        raise AssertionError(f"a ```{language} block is not run by the doc tests: use one of {', '.join(EVALUATORS)}")

    return evaluate


pytest_collect_file = Sybil(
    parsers=[SkipParser(), FencedBlockParser()],
    patterns=["README.md", "docs/*.md", "docs/**/*.md"],
    path=str(ROOT),
    setup=setup,
    teardown=teardown,
).pytest()
