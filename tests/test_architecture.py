"""The plan of the package, checked on its source: who may import whom, who may ask which
source a window has, where the thread hops are; and the suite's HTTP clients."""

import ast
from pathlib import Path

APP = Path(__file__).parents[1] / "app" / "specdec_collector"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _modules(folder: str) -> list[Path]:
    return sorted((APP / folder).rglob("*.py"))


def test_routes_call_the_windows_facade_only() -> None:
    for route in _modules("service/routes"):
        windows = {m for m in _imports(route) if m.startswith("specdec_collector.windows")}
        assert windows <= {"specdec_collector.windows.service"}, (route.name, windows)


def test_the_core_does_no_io_and_imports_nothing_above_it() -> None:
    allowed = ("specdec_collector.core", "specdec_collector.exceptions")
    for module in _modules("core"):
        ours = {m for m in _imports(module) if m.startswith("specdec_collector")}
        assert all(m.startswith(allowed) for m in ours), (module.name, ours)
        assert not _imports(module) & {"httpx", "sqlalchemy", "sqlmodel", "fastapi", "asyncio"}


def test_the_core_keeps_no_state_of_its_own() -> None:
    """No cache or registry at module level in `core/`: a cache is an object with an owner
    (an endpoint's extraction cache, a policy's answers), so nothing one team's traffic
    fills is shared by every other's."""
    for module in _modules("core"):
        tree = ast.parse(module.read_text())
        decorators = [
            ast.unparse(d) for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            for d in node.decorator_list
        ]  # fmt: skip
        assert not [d for d in decorators if "cache" in d], (module.name, decorators)
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                made = ast.unparse(node.value)
                assert not made.startswith(("PerEngine(", "WeakKeyDictionary(", "[]", "{}")), (
                    module.name,
                    made,
                )


def test_sources_only_read() -> None:
    for module in _modules("sources"):
        ours = {m for m in _imports(module) if m.startswith("specdec_collector")}
        writes = {
            m
            for m in ours
            if m.startswith(("specdec_collector.store.db", "specdec_collector.windows"))
        }
        assert not writes, (module.name, writes)


def test_windows_routes_and_models_never_ask_which_source_a_window_has() -> None:
    places = [
        *_modules("windows"),
        *_modules("service/routes"),
        *_modules("store"),
        APP / "schemas.py",
    ]
    for module in places:
        tree = ast.parse(module.read_text())
        compares = [
            node for node in ast.walk(tree)
            if isinstance(node, ast.Compare)
            and any("Source." in ast.unparse(side) for side in [node.left, *node.comparators])
        ]  # fmt: skip
        assert compares == [], (module.name, [ast.unparse(c) for c in compares])


#: What decides where work runs: the store's alone (`store.store.Store`).
_WHERE_WORK_RUNS = {
    "starlette.concurrency",
    "concurrent.futures",
    "specdec_collector.store.lanes",
    "specdec_collector.store.small_reads",
    "specdec_collector.gcpause",
}


def test_the_service_reaches_sources_only_through_what_the_lifespan_hands_it() -> None:
    """The picture's service calls windows only: the lifespan (`service/main.py`) builds the
    sources and hands them on; the sampler reads through the scrape source it is given."""
    for module in _modules("service"):
        if module.name == "main.py":
            continue
        sources = {m for m in _imports(module) if m.startswith("specdec_collector.sources")}
        assert not sources, (module.name, sources)


def test_windows_and_the_service_touch_the_database_only_through_the_store() -> None:
    """Neither `windows/` nor `service/` decides a thread, a lane or the loop for database
    work: no thread hop, no lane, no small-read path of their own; the store decides."""
    for module in [*_modules("windows"), *_modules("service")]:
        if module.name == "main.py":  # the lifespan tunes the collector (`gcpause`) once
            imported = _imports(module) - {"specdec_collector.gcpause"}
        else:
            imported = _imports(module)
        assert not imported & _WHERE_WORK_RUNS, (module.name, imported & _WHERE_WORK_RUNS)
        text = module.read_text()
        for hop in ("run_in_threadpool", "to_thread(", "run_in_executor("):
            assert hop not in text, (module.name, hop)


#: Run as processes of their own, each making its clients' context once anyway; the AISBench
#: stand-in uses httpx as a benchmark client would.
_OWN_PROCESSES = {"aisbench_standin.py", "netns_probe.py"}


def test_the_suites_http_clients_share_one_tls_context() -> None:
    """Each httpx client builds a TLS context (~19 ms of CPU); the suite's come from
    `tests.support.clients`, which makes it once. A client with its own transport builds none."""
    made_apart = []
    for module in sorted(Path(__file__).parent.rglob("*.py")):
        if "bench" in module.parts or module.name in {"clients.py", *_OWN_PROCESSES}:
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "httpx"
                and node.func.attr
                in {"get", "post", "put", "delete", "request", "stream"} | {"Client", "AsyncClient"}
                and "transport" not in {keyword.arg for keyword in node.keywords}
            ):
                made_apart.append(f"{module.name}:{node.lineno}")
    assert made_apart == []


def test_the_core_tests_start_no_server_or_process() -> None:
    """`pytest tests/core` is the seconds-long inner loop: pure functions only."""
    heavy = {"subprocess", "tests.support.collector", "tests.support.metrics_server", "httpx"}
    for module in sorted((Path(__file__).parent / "core").glob("test_*.py")):
        assert not _imports(module) & heavy, (module.name, _imports(module) & heavy)


def test_every_function_is_short_and_simple() -> None:
    """At most 80 lines and a cyclomatic complexity of 20 (radon's count), the argument
    parser's table aside: a function does one thing."""
    from radon.complexity import cc_visit

    long, complex_ = [], []
    for module in sorted(APP.rglob("*.py")):
        source = module.read_text()
        functions = [
            node
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name != "build_parser"
        ]
        long += [
            f"{module.name}:{f.name}" for f in functions if (f.end_lineno or 0) - f.lineno >= 80
        ]
        complex_ += [f"{module.name}:{b.name}" for b in cc_visit(source) if b.complexity > 20]
    assert long == [] and complex_ == []
