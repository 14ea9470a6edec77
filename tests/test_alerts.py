"""deploy/prometheus-alerts.yaml proven with ``promtool test rules`` (Debian's prometheus package,
installed by scripts/setup), and deploy/grafana-dashboard.json's queries scoped to a job."""

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


def promtool():
    path = shutil.which("promtool")
    assert path, "promtool is missing: run scripts/setup (Debian's prometheus package)"
    return path


def test_the_rules_are_valid():
    result = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


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
