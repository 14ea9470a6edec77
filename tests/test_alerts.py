"""deploy/prometheus-alerts.yaml proven with ``promtool test rules`` (Debian's prometheus package,
installed by scripts/setup), and deploy/grafana-dashboard.json's queries scoped to a job.

The tests that run promtool are marked integration: like Redis and Docker,
it is something scripts/setup installs, and the pure suite
(``-m "not integration"``) skips the setup. The rest read the files alone."""

import json
import re
import shutil
import subprocess

import pytest
import yaml

from tests.support.relay_process import ROOT

ALERTS = ROOT / "deploy" / "prometheus-alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana-dashboard.json"
DOWN_DESCRIPTION = ("Prometheus has had no metrics from Relay for 5 minutes. Check the service "
                    "(systemctl status relay, relay health) and the scrape configuration.")
BUILD_ANNOTATIONS = {"summary": "Image builds of function orders are failing",
                     "description": "The previous version keeps serving; see Relay's logs for the build output."}


def alert(name, eval_time, *expected):
    return {"eval_time": eval_time, "alertname": name, "exp_alerts": list(expected)}


def firing(labels, annotations):
    return {"exp_labels": labels, "exp_annotations": annotations}


# name: (input series {selector: values}, [alert_rule_test entries])
CASES = {
    "a target whose scrapes fail is down after 5 minutes": (
        {'up{job="relay",instance="a:9090"}': "1 1 0x10"},
        [alert("RelayDown", "6m"),     # down since 2m: still pending
         alert("RelayDown", "8m", firing({"severity": "critical", "job": "relay", "instance": "a:9090"},
                                         {"summary": "Relay on a:9090 is down or not scraped",
                                          "description": DOWN_DESCRIPTION}))]),
    "no relay target at all is not scraped": (
        {'up{job="node",instance="b:9100"}': "1x10"},
        [alert("RelayDown", "4m"),
         alert("RelayDown", "6m", firing({"severity": "critical", "job": "relay"},
                                         {"summary": "Relay is down or not scraped",
                                          "description": DOWN_DESCRIPTION}))]),
    "a relay that answers is not down": (
        {'up{job="relay",instance="a:9090"}': "1x15"},
        [alert("RelayDown", "10m")]),
    "the first build failure of a function created at 0 fires": (
        {'build_failures_total{job="relay",instance="a:9090",function="orders"}': "0x5 1x5"},
        [alert("RelayBuildFailures", "4m"),
         alert("RelayBuildFailures", "7m", firing({"severity": "warning", "function": "orders"},
                                                  BUILD_ANNOTATIONS))]),
    # Why Relay creates the series at 0: a counter born at 1 is no increase() at all.
    "a counter first seen at 1 is no increase": (
        {'build_failures_total{job="relay",instance="a:9090",function="orders"}': "_x5 1x5"},
        [alert("RelayBuildFailures", "7m")]),
    "another job's build failures are not relay's": (
        {'build_failures_total{job="other",instance="c:9090",function="orders"}': "0x5 1x5"},
        [alert("RelayBuildFailures", "7m")]),
    "a dead letter fires at once": (
        {'dlq_entries_total{job="relay",instance="a:9090"}': "0x20 1x20"},
        [alert("RelayDeadLetters", "19m"),
         alert("RelayDeadLetters", "25m", firing(
             {"severity": "warning"},
             {"summary": "Relay entries dead-lettered in 15 minutes: 1",
              "description": "Entries whose handlers exhausted their retries are in relay:<stream>:dlq "
                             "(relay dlq ls)."}))]),
    "an old backlog for 10 minutes": (
        {'pending_oldest_age_seconds{job="relay",instance="a:9090"}': "1000x20"},
        [alert("RelayBacklogOld", "9m"),
         alert("RelayBacklogOld", "11m", firing(
             {"severity": "warning"},
             {"summary": "The oldest pending Relay entry is 16m 40s old",
              "description": "Entries stay pending; workers may be down, saturated or failing."}))]),
    "handlers failing more than every 10 seconds for 10 minutes": (
        {'function_handler_failure_total{job="relay",instance="a:9090",function="orders"}': "0+10x30"},
        [alert("RelayHandlerFailures", "15m"),
         alert("RelayHandlerFailures", "22m", firing(
             {"severity": "info", "function": "orders"},
             {"summary": "Handlers of orders fail more than once every 10 seconds"}))]),
}


needs_promtool = pytest.mark.integration


def promtool():
    path = shutil.which("promtool")
    assert path, "promtool is missing: run scripts/setup (Debian's prometheus package)"
    return path


@needs_promtool
def test_the_rules_are_valid():
    result = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


@needs_promtool
@pytest.mark.parametrize("case", CASES)
def test_rule_behaviour(case, tmp_path):
    series, tests = CASES[case]
    document = {"rule_files": [str(ALERTS)], "evaluation_interval": "1m",
                "tests": [{"interval": "1m",
                           "input_series": [{"series": name, "values": values} for name, values in series.items()],
                           "alert_rule_test": tests}]}
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_selects_the_relay_job():
    rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    for rule in rules:
        for selector in re.findall(r"([a-z_]+)(\{[^}]*\})?", rule["expr"]):
            name, labels = selector
            if name.endswith(("_total", "_seconds")) or name == "up":
                assert 'job="relay"' in labels, (rule["alert"], name)


def dashboard_queries():
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", ()):
            yield panel["title"], target["expr"]


METRIC = re.compile(r"\b([a-z_]+(?:_total|_bucket|_seconds|_entries|_events|_invocations|_containers))\b(\{[^}]*\})?")


def test_every_dashboard_query_selects_the_job_variable():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["job"]["query"]["query"] == "label_values(up, job)"
    assert variables["job"]["current"]["value"] == "relay"
    queries = list(dashboard_queries())
    assert len(queries) >= 10
    for title, expr in queries:
        metrics = METRIC.findall(expr)
        assert metrics, (title, expr)
        for name, labels in metrics:
            assert labels == '{job=~"$job"}', (title, name, expr)


# -- what the dashboard shows -------------------------------------------------------

SELECTED = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{")
COUNTED = {"dlq_entries_total", "function_dlq_entries_total", "build_failures_total", "events_expired_total"}


def dashboard_panels():
    return json.loads(DASHBOARD.read_text())["panels"]


def as_promql(expr):
    """A dashboard query as Prometheus gets it from Grafana, over a 1 h range."""
    return expr.replace("$__rate_interval", "2m").replace("$__range", "1h").replace('=~"$job"', '=~"relay"')


def exposed_series():
    """The series names Relay's registry exposes: counters with _total, histograms' buckets."""
    from relay.metrics.prometheus import Metrics

    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    return {family.name + suffix for family in Metrics().registry.collect() for suffix in suffixes[family.type]}


def test_every_metric_the_dashboard_queries_is_one_relay_exposes():
    queried = {name for _title, expr in dashboard_queries() for name in SELECTED.findall(expr)}
    assert queried
    assert queried - exposed_series() == set()


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path):
    rules = [{"record": f"dashboard:query_{index}", "expr": as_promql(expr)}
             for index, (_title, expr) in enumerate(dashboard_queries())]
    path = tmp_path / "dashboard.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_has_panels_for_warm_containers_limit_waits_and_expired_events():
    queried = {name: title for title, expr in dashboard_queries() for name in SELECTED.findall(expr)}
    for name in ("warm_containers", "rate_limit_waits_total", "concurrency_key_waits_total",
                 "rate_limit_wait_seconds_total", "concurrency_key_wait_seconds_total", "events_expired_total"):
        assert name in queried, f"no panel shows {name}"


def test_dead_letters_build_failures_and_expired_events_are_counts_over_the_range():
    """A time series of increase(...[$__range]) draws, at every point, the increase over the
    whole range before it: a line that climbs and falls with no count in it. These are stat
    panels of one instant query each: the number in the dashboard's range."""
    counting = {}
    for panel in dashboard_panels():
        for target in panel.get("targets", ()):
            names = set(SELECTED.findall(target["expr"]))
            if "[$__range]" in target["expr"]:
                assert panel["type"] == "stat" and target.get("instant") is True, panel["title"]
            if names & COUNTED:
                assert panel["type"] == "stat", f"{panel['title']} shows {names & COUNTED} as a {panel['type']}"
                assert "[$__range]" in target["expr"] and target["expr"].startswith("round("), target["expr"]
                counting.update(dict.fromkeys(names & COUNTED, target["expr"]))
    assert set(counting) == COUNTED


def test_the_counts_are_whole_numbers_of_events_in_the_range(tmp_path):
    """promtool evaluates the stat queries on series Relay would expose: three dead letters
    (two of orders), one build failure and two expired entries in the last hour, after a
    dead letter and a build failure before it. increase() extrapolates; the panels round."""
    def series(name, values, **labels):
        selector = ",".join(f'{key}="{value}"' for key, value in {"job": "relay", "instance": "a:9090",
                                                                   **labels}.items())
        return {"series": f"{name}{{{selector}}}", "values": values}

    queries = {expr: title for title, expr in dashboard_queries()
               if set(SELECTED.findall(expr)) & COUNTED}
    expected = {"dlq_entries_total": [({}, 3)],
                "function_dlq_entries_total": [({"function": "orders"}, 2), ({"function": "users"}, 1)],
                "build_failures_total": [({"function": "orders"}, 1), ({"function": "users"}, 0)],
                "events_expired_total": [({"function": "orders"}, 2), ({"function": "users"}, 0)]}
    tests = []
    for expr in queries:
        [name] = set(SELECTED.findall(expr)) & COUNTED
        tests.append({"expr": as_promql(expr), "eval_time": "90m",
                      "exp_samples": [{"labels": "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}",
                                       "value": value} for labels, value in expected[name]]})
    document = {"rule_files": [], "evaluation_interval": "1m", "tests": [{"interval": "1m", "input_series": [
        series("dlq_entries_total", "0x20 1x30 2x10 3x10 4x30"),
        series("function_dlq_entries_total", "0x20 1x30 2x20 3x30", function="orders"),
        series("function_dlq_entries_total", "0x60 1x40", function="users"),
        series("build_failures_total", "0x10 1x40 2x50", function="orders"),
        series("build_failures_total", "0x100", function="users"),
        series("events_expired_total", "0x20 1x20 3x60", function="orders"),
        series("events_expired_total", "0x100", function="users"),
    ], "promql_expr_test": tests}]}
    path = tmp_path / "counts.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
