"""bench/run_all.py without Redis or Docker: discovery, the table, the README
markers, and a failing bench that shows as failed with exit status 1; and
startup.py's refusal to time a command that fails."""

import json
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
# bench/ goes on sys.path only for these imports: it also holds invoke.py,
# which would shadow the invoke package that paramiko imports.
sys.path.insert(0, str(BENCH))
try:
    import report
    import run_all
    import startup
finally:
    sys.path.remove(str(BENCH))

README = f"# Benchmarks\n\nintro\n\n{run_all.BEGIN}\nold table\n{run_all.END}\n\n## Notes\n\nkept\n"


def result(**changes):
    fields = dict(benchmark="x.py", figure="speed", value=1500.0, unit="entries/s", baseline_value=2000.0,
                  baseline="minimal loop", ratio=0.75, target="ratio >= 0.8 (#5)", met=False)
    return report.Result(**{**fields, **changes})


def test_discovery_skips_the_runner_and_helpers(tmp_path):
    for name in ("b.py", "a.py", "run_all.py", "report.py", "_private.py", "notes.md"):
        (tmp_path / name).write_text("")
    assert [path.name for path in run_all.discover(tmp_path)] == ["a.py", "b.py"]
    assert {path.name for path in run_all.discover()} >= {"startup.py", "matcher.py", "invoke.py", "throughput.py"}


def test_declared_args_are_read_without_importing(tmp_path):
    bench = tmp_path / "b.py"
    bench.write_text('import nothing_such\nQUICK_ARGS = ["--runs", "3"]\n')
    assert run_all.declared_args(bench, "QUICK_ARGS") == ["--runs", "3"]
    assert run_all.declared_args(bench, "RUN_ALL_ARGS") == []


def test_table_rows(tmp_path):
    outcomes = [run_all.Outcome("x.py", [result(),
                                         result(figure="p50 | latency", value=12.345, unit="ms", baseline_value=None,
                                                ratio=None, target="", met=None)]),
                run_all.Outcome("y.py", failure="exit status 1: boom")]
    lines = run_all.table(outcomes).splitlines()
    assert lines[0] == "| Benchmark | Figure | Relay | Baseline | Ratio | Target | Met |"
    assert lines[2] == ("| x.py | speed | 1,500 entries/s | 2,000 entries/s (minimal loop) | 0.750 "
                        "| ratio >= 0.8 (#5) | **no** |")
    assert lines[3] == "| x.py | p50 \\| latency | 12.3 ms | — | — | — | — |"
    assert lines[4] == "| y.py | **failed**: exit status 1: boom | — | — | — | — | **failed** |"


def test_results_round_trip(tmp_path):
    path = tmp_path / "results.jsonl"
    report.write(path, [result()])
    report.write(path, [result(met=True)])
    assert report.read(path) == [result(), result(met=True)]
    path.write_text('{"not": "a result"}\n')
    with pytest.raises(ValueError):
        report.read(path)


def test_failure_rules():
    missed, met = [result()], [result(met=True)]
    assert run_all.failure_of(0, False, 60, met, []) is None
    assert run_all.failure_of(1, False, 60, missed, []) is None  # invoke.py exits 1 on a missed target
    assert run_all.failure_of(1, False, 60, met, ["Traceback", "KeyError: 'x'"]) == "exit status 1: KeyError: 'x'"
    assert run_all.failure_of(0, False, 60, [], []).startswith("reported no figures")
    assert run_all.failure_of(-9, True, 60, [], []) == "timed out after 60 s"
    assert run_all.failure_of(-9, False, 60, met, []) == "killed by signal 9"


def test_marker_replacement_keeps_the_rest():
    updated = run_all.replace_section(README, "| new | table |\n")
    assert "old table" not in updated
    assert f"intro\n\n{run_all.BEGIN}\n| new | table |\n{run_all.END}\n\n## Notes\n\nkept\n" in updated
    assert run_all.replace_section(updated, "| new | table |") == updated
    with pytest.raises(ValueError):
        run_all.replace_section("# no markers\n", "x")
    with pytest.raises(ValueError):
        run_all.replace_section(f"{run_all.END}\n{run_all.BEGIN}\n", "x")


def test_a_failing_bench_is_shown_failed_and_the_command_exits_1(tmp_path, monkeypatch, capsys):
    good = {**result().__dict__, "benchmark": "good.py", "met": True}
    (tmp_path / "good.py").write_text(textwrap.dedent(f"""\
        import sys
        QUICK_ARGS = ["--small"]
        path = sys.argv[sys.argv.index("--json") + 1]
        assert sys.argv[-1] == "--small"
        print("human output")
        open(path, "a").write({json.dumps(json.dumps(good))} + "\\n")
        """))
    (tmp_path / "broken.py").write_text('raise SystemExit("docker is not reachable")\n')
    (tmp_path / "silent.py").write_text("print('no --json support')\n")
    (tmp_path / "README.md").write_text(README)
    monkeypatch.setattr(run_all, "machine_info", lambda: {"Machine": "test box"})

    status = run_all.main(["--quick", "--write", "--bench-dir", str(tmp_path), "--readme", str(tmp_path / "README.md")])

    out, err = capsys.readouterr()
    assert status == 1
    assert "human output" in err and "human output" not in out
    assert "| good.py | speed | 1,500 entries/s |" in out
    assert "| broken.py | **failed**: exit status 1: docker is not reachable |" in out
    assert "| silent.py | **failed**: reported no figures" in out
    assert "- Machine: test box" in out
    written = (tmp_path / "README.md").read_text()
    assert out.rstrip() in written and "old table" not in written and written.endswith("kept\n")


def test_startup_never_times_a_failing_command():
    assert startup.run([sys.executable, "-c", "pass"], {}) > 0
    with pytest.raises(SystemExit, match=r"exited 3; not timing a failing command:\n.*no Redis here"):
        startup.run([sys.executable, "-c", "import sys; print('no Redis here', file=sys.stderr); sys.exit(3)"], {})


def test_startup_writes_a_state_database_the_commands_can_read(tmp_path):
    """The state it times `function ls` and `stats` against is the current schema's."""
    from relay.view.reader import StateReader

    startup.write_state(tmp_path)
    reader = StateReader(tmp_path / "db.sqlite3")
    names = [record.name for record in reader.functions()]
    assert names and names == sorted(names)
    assert reader.function_stats(names[0]).counters.events_processed == 1200
