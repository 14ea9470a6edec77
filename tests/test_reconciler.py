"""The reconciler over real directories, with a stand-in image builder (no Docker)."""

import logging
import shutil
from datetime import UTC, datetime, timedelta

import gevent
import pytest
from gevent.event import Event

from relay.live.catalog import Catalog
from relay.live.reconciler import ActiveImages, Reconciler
from relay.live.status import Outcome
from relay.view.writer import function_record
from tests.support.reconciler import TEMPLATE, Builder, write


class Clock:
    def __init__(self):
        self.moment = datetime(2026, 9, 8, 12, 0, 0, tzinfo=UTC)

    def __call__(self):
        self.moment += timedelta(seconds=1)
        return self.moment


@pytest.fixture
def root(tmp_path):
    directory = tmp_path / "functions"
    directory.mkdir()
    return directory


@pytest.fixture
def world(root):
    """A reconciler wired like the supervisor does, with its collaborators exposed."""

    class Views(list):
        def functions_changed(self, statuses):
            self.append(statuses)

    class World:
        builder = Builder()
        catalog = Catalog()
        retired = []
        views = Views()
        clock = Clock()
        reconciler = Reconciler(root, builder, catalog, retire=retired.append, observers=[views], clock=clock)

        def names(self):
            return [active.name for active in self.catalog.snapshot()]

        def image(self, name):
            return dict(ActiveImages(self.catalog)).get(name)

    return World()


def test_startup_load_serves_valid_functions_and_skips_the_rest(root, world, caplog):
    write(root, "good")
    write(root, "unbuildable")
    write(root, "broken", template="runtime: python3.14\nevents: []\n")
    write(root, "Bad Name")
    write(root, "no-template", template=None)
    (root / "a-file").write_text("not a function")
    world.builder.failing.add("unbuildable")
    with caplog.at_level(logging.DEBUG, logger="relay.live.reconciler"):
        assert world.reconciler.load_all() == 5
    assert world.names() == ["good"]
    statuses = world.reconciler.statuses
    assert sorted(statuses) == ["good", "unbuildable"]
    assert (statuses["good"].ready, statuses["good"].last_outcome) == (True, Outcome.SUCCEEDED)
    pending = statuses["unbuildable"]
    assert (pending.ready, pending.last_outcome, pending.image) == (False, Outcome.FAILED, None)
    template = pending.function.template
    assert "boom" in pending.last_error and template.runtime == "python3.14" and len(template.rules) == 2
    messages = {record.getMessage(): record for record in caplog.records}
    assert "Invalid function name; directory skipped" in messages
    assert "Invalid function; skipped" in messages and "events" in messages["Invalid function; skipped"].error
    assert "Function is pending: its image could not be built" in messages
    assert "Directory has no template.yaml; ignored" in messages


def test_an_unchanged_function_is_left_alone_and_nothing_is_recorded(root, world):
    write(root, "good")
    world.reconciler.load_all()
    before, views = world.reconciler.statuses["good"], len(world.views)
    world.reconciler.rescan()
    world.reconciler._pool.join()
    assert world.builder.built == ["good"]
    assert world.reconciler.statuses["good"] is before and len(world.views) == views


def test_a_change_builds_and_swaps_and_retires_the_old_image(root, world):
    write(root, "good")
    world.reconciler.load_all()
    old_snapshot = world.catalog.snapshot()
    old = world.image("good")
    write(root, "good", source="def handler(event):\n    print('v2')\n")
    world.reconciler.reconcile("good")
    new = world.image("good")
    assert new != old and new.startswith("relay-fn-good:")
    assert old_snapshot[0].image == old, "a snapshot taken before the swap never changes"
    assert world.retired == [old]
    status = world.reconciler.statuses["good"]
    assert (status.ready, status.image, status.last_outcome) == (True, new, Outcome.SUCCEEDED)
    assert status.function is world.catalog.snapshot()[0].function


def test_nested_files_count(root, world):
    write(root, "good", pkg__inner__jobs="X = 1\n")
    world.reconciler.load_all()
    old = world.image("good")
    (root / "good" / "pkg" / "inner" / "jobs.py").write_text("X = 2\n")
    world.reconciler.reconcile("good")
    assert world.image("good") != old


def test_a_failed_rebuild_keeps_the_previous_version_and_is_retried(root, world):
    write(root, "good")
    world.reconciler.load_all()
    serving = world.image("good")
    write(root, "good", source="def handler(event):\n    print('v2')\n")
    world.builder.failing.add("good")
    world.reconciler.reconcile("good")
    assert world.image("good") == serving
    status = world.reconciler.statuses["good"]
    assert (status.ready, status.image, status.last_outcome) == (True, serving, Outcome.FAILED)
    assert "boom" in status.last_error

    world.reconciler.reconcile("good")           # the periodic pass tries a failed build again
    assert world.builder.built.count("good") == 3 and world.image("good") == serving
    world.builder.failing.clear()
    world.reconciler.reconcile("good")
    assert world.image("good") != serving and world.retired == [serving]
    status = world.reconciler.statuses["good"]
    assert (status.last_outcome, status.last_error) == (Outcome.SUCCEEDED, None)


def test_an_invalid_edit_keeps_the_previous_version_and_is_not_retried_until_it_changes(root, world, caplog):
    write(root, "good")
    world.reconciler.load_all()
    serving = world.image("good")
    (root / "good" / "template.yaml").write_text("runtime: python9\nevents: []\n")
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="relay.live.reconciler"):
        world.reconciler.reconcile("good")
        world.reconciler.reconcile("good")
    assert [record.getMessage() for record in caplog.records] == [
        "Invalid function; the previous version keeps serving"]
    status = world.reconciler.statuses["good"]
    assert (status.ready, status.image, status.last_outcome) == (True, serving, Outcome.FAILED)
    template = status.function.template
    assert "python9" in status.last_error and template.runtime == "python3.14" and len(template.rules) == 2
    assert world.builder.built == ["good"] and world.image("good") == serving


def test_reverting_to_the_serving_version_clears_the_failure_without_a_build(root, world):
    write(root, "good")
    world.reconciler.load_all()
    original = (root / "good" / "template.yaml").read_text()
    (root / "good" / "template.yaml").write_text("runtime: python9\n")
    world.reconciler.reconcile("good")
    (root / "good" / "template.yaml").write_text(original)
    world.reconciler.reconcile("good")
    status = world.reconciler.statuses["good"]
    assert (status.last_outcome, status.last_error) == (Outcome.SUCCEEDED, None)
    assert world.builder.built == ["good"]


def test_a_missing_template_keeps_the_active_version(root, world, caplog):
    write(root, "good")
    world.reconciler.load_all()
    serving = world.image("good")
    (root / "good" / "template.yaml").unlink()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="relay.live.reconciler"):
        world.reconciler.reconcile("good")
        world.reconciler.reconcile("good")
    assert world.image("good") == serving and world.reconciler.statuses["good"].ready
    assert [record.getMessage() for record in caplog.records] == [
        "Function directory has no template.yaml; the active version keeps serving"]


def test_removal_stops_matching_and_retires_the_image(root, world):
    write(root, "good")
    write(root, "other")
    world.reconciler.load_all()
    serving = world.image("good")
    in_flight = world.catalog.snapshot()
    shutil.rmtree(root / "good")
    world.reconciler.reconcile("good")
    assert world.names() == ["other"] and "good" not in world.reconciler.statuses
    assert world.retired == [serving]
    assert [active.name for active in in_flight] == ["good", "other"], "a running dispatch keeps its snapshot"
    assert [record.name for record in world.views[-1]] == ["other"]


def test_removing_a_pending_function_drops_its_row(root, world):
    write(root, "flaky")
    world.builder.failing.add("flaky")
    world.reconciler.load_all()
    assert [function.name for function in world.catalog.waiting()] == ["flaky"]
    shutil.rmtree(root / "flaky")
    world.reconciler.reconcile("flaky")
    assert world.reconciler.statuses == {} and world.retired == []
    assert world.catalog.waiting() == ()


def test_a_new_function_is_pending_while_it_builds_then_ready(root, world):
    world.reconciler.load_all()
    write(root, "fresh")
    world.builder.gate = Event()
    running = gevent.spawn(world.reconciler.reconcile, "fresh")
    gevent.sleep(0.05)
    assert world.names() == [] and not world.reconciler.statuses["fresh"].ready
    assert world.reconciler.statuses["fresh"].last_outcome is None
    world.builder.gate.set()
    running.get(timeout=5)
    assert world.names() == ["fresh"] and world.reconciler.statuses["fresh"].ready


def test_a_pending_function_becomes_ready_on_a_later_pass(root, world):
    write(root, "flaky")
    world.builder.failing.add("flaky")
    world.reconciler.load_all()
    assert world.names() == [] and [function.name for function in world.catalog.waiting()] == ["flaky"]
    world.builder.failing.clear()
    world.reconciler.rescan()
    world.reconciler._pool.join()
    status = world.reconciler.statuses["flaky"]
    assert (status.ready, status.last_outcome, status.last_error) == (True, Outcome.SUCCEEDED, None)
    assert world.names() == ["flaky"] and world.catalog.waiting() == ()
    assert status.prepared_at is not None


def test_requests_during_a_reconcile_coalesce_into_one_more_pass(root, world):
    write(root, "good")
    world.builder.gate = Event()
    world.reconciler.request("good")
    gevent.sleep(0.05)
    write(root, "good", source="def handler(event):\n    print('v2')\n")
    for _ in range(5):
        world.reconciler.request("good")
    world.builder.gate.set()
    world.reconciler._pool.join(timeout=5)
    assert world.builder.built == ["good", "good"]
    assert world.catalog.snapshot()[0].function is world.reconciler.statuses["good"].function


def test_an_unexpected_error_is_a_failed_reconcile_not_a_crash(root, world, caplog):
    class Exploding(Builder):
        def prepare(self, function):
            raise OSError("disk full")

    reconciler = Reconciler(root, Exploding(), world.catalog, clock=world.clock)
    write(root, "good")
    with caplog.at_level(logging.ERROR, logger="relay.live.reconciler"):
        assert reconciler.load_all() == 1
    assert reconciler.statuses["good"].last_error == "disk full"
    assert "Preparing the function's image failed unexpectedly" in caplog.text


def test_the_state_row_holds_references_never_values(root, world):
    write(root, "configured", template=TEMPLATE + """
schedules:
  - handler: jobs.report
    cron: "0 8 * * 1-5"
    timezone: Europe/Rome
    timeout: 20s
env:
  API_URL: https://api.example.com
secrets:
  DATABASE_URL: database-url
""")
    world.reconciler.load_all()
    record = function_record(world.reconciler.statuses["configured"])
    assert record.env == {"API_URL": "https://api.example.com"}
    assert record.secrets == {"DATABASE_URL": "database-url"}
    assert [(item.kind, item.handler, item.timeout, item.cron, item.timezone) for item in record.handlers] == [
        ("event", "app.handler", "6s", None, None), ("event", "app.other", "20s", None, None),
        ("schedule", "jobs.report", "20s", "0 8 * * 1-5", "Europe/Rome")]


def test_a_stopped_reconciler_takes_no_requests(root, world):
    write(root, "good")
    world.reconciler.stop()
    world.reconciler.request("good")
    world.reconciler._pool.join()
    assert world.builder.built == []


def test_the_startup_load_publishes_its_view_even_when_empty(world):
    world.reconciler.load_all()
    assert world.views == [[]]


def test_an_image_gone_from_the_engine_is_built_again_once(root, world, caplog):
    write(root, "good")
    world.reconciler.load_all()
    serving = world.image("good")
    with caplog.at_level(logging.INFO, logger="relay.live.reconciler"):
        world.reconciler.image_missing("good", serving)
        world.reconciler.image_missing("good", serving)      # a second invocation before the rebuild: one rebuild
        world.reconciler._pool.join()
    assert world.builder.built == ["good", "good"] and world.image("good") == serving and world.retired == []
    messages = [record.getMessage() for record in caplog.records]
    assert messages.count("Function image is missing from the engine; building it again") == 1
    assert "Function image rebuilt" in messages
    world.reconciler.rescan()
    world.reconciler._pool.join()
    assert world.builder.built == ["good", "good"], "once rebuilt, an unchanged function is left alone again"


def test_a_missing_image_whose_rebuild_fails_is_tried_again_on_the_next_pass(root, world):
    write(root, "good")
    world.reconciler.load_all()
    serving = world.image("good")
    world.builder.failing.add("good")
    world.reconciler.image_missing("good", serving)
    world.reconciler._pool.join()
    assert world.reconciler.statuses["good"].last_outcome is Outcome.FAILED
    world.builder.failing.clear()
    world.reconciler.rescan()
    world.reconciler._pool.join()
    assert world.builder.built == ["good", "good", "good"]
    assert world.reconciler.statuses["good"].last_outcome is Outcome.SUCCEEDED


def test_a_missing_image_that_is_no_longer_active_is_ignored(root, world):
    write(root, "good")
    world.reconciler.load_all()
    world.reconciler.image_missing("good", "relay-fn-good:0000000000000000")   # an old version's, retired
    world.reconciler.image_missing("unknown", "relay-fn-unknown:0000000000000000")
    world.reconciler._pool.join()
    assert world.builder.built == ["good"]


def test_fifos_where_relay_reads_files_are_refused_and_logged_never_opened(root, world, caplog):
    """A FIFO as template.yaml was taken for "no template" (silently not ready), and a FIFO
    manifest or handler module was left out of the image; each is now an invalid function."""
    import os

    write(root, "good")
    os.mkfifo(write(root, "piped-template", template=None) / "template.yaml")
    os.mkfifo(write(root, "piped-requirements") / "requirements.txt")
    handler = write(root, "piped-handler")
    (handler / "app.py").unlink()
    os.mkfifo(handler / "app.py")
    with caplog.at_level(logging.INFO, logger="relay.live.reconciler"):
        assert world.reconciler.load_all() == 4
    assert world.names() == ["good"]
    refused = {record.function: record.error for record in caplog.records
               if record.getMessage() == "Invalid function; skipped"}
    fifo = "is a FIFO (named pipe), not a regular file; Relay reads only regular files"
    assert refused == {
        "piped-template": f"{root / 'piped-template' / 'template.yaml'}: 1 problem\n  {fifo}",
        "piped-requirements": f"{root / 'piped-requirements' / 'template.yaml'}: 1 problem\n"
                              f"  {root / 'piped-requirements' / 'requirements.txt'}: {fifo}",
        "piped-handler": f"{root / 'piped-handler' / 'template.yaml'}: 2 problems\n"
                         f"  line 4: events[0].handler: app.handler: {root / 'piped-handler' / 'app.py'} {fifo}\n"
                         f"  line 6: events[1].handler: app.other: {root / 'piped-handler' / 'app.py'} {fifo}"}


def test_a_templates_warnings_are_logged_once_each_and_the_function_serves(root, world, caplog):
    write(root, "priced", template="runtime: python3.14\nevents:\n  - handler: app.handler\n"
                                   "    pattern: {price: {numeric: ['>', 100]}}\n")
    with caplog.at_level(logging.INFO, logger="relay.live.reconciler"):
        world.reconciler.load_all()
        world.reconciler.rescan()
        world.reconciler._pool.join()
    assert world.names() == ["priced"]
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    (warning,) = warnings
    assert warning.getMessage() == "Template warning; the function loads all the same"
    assert (warning.function, warning.file, warning.line, warning.field) == (
        "priced", str(root / "priced" / "template.yaml"), 4, "events[0].pattern.price.numeric")
    assert warning.warning.endswith("write {gt: 100}")
