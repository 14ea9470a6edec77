// The Relay console's one script, served from the package (no inline script: the CSP forbids it).
// 1. The runs page: new runs appear at the top without a reload (polls /api/runs every 3 s).
// 2. A replay's page: its progress, and a reload when its state changes (polls /api/replay/<id>).
// 3. Buttons with data-confirm ask before they submit.
// Every value goes into the page as text (textContent), never as HTML.
"use strict";

(function () {
  function cell(row, text, href, badge) {
    var td = document.createElement("td");
    var inner = td;
    if (href) { inner = document.createElement("a"); inner.href = href; td.appendChild(inner); }
    if (badge) { var span = document.createElement("span"); span.className = "badge " + badge; inner.appendChild(span); inner = span; }
    inner.textContent = text;
    row.appendChild(td);
  }

  function pollRuns(body) {
    var url = body.getAttribute("data-poll");
    if (!url) { return; }
    function tick() {
      var after = body.getAttribute("data-after");
      if (!after) { return setTimeout(tick, 3000); }
      fetch(url + (url.indexOf("?") < 0 ? "?" : "&") + "after=" + encodeURIComponent(after),
            {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (data) {
          if (data && data.runs) {
            for (var index = data.runs.length - 1; index >= 0; index--) {
              var run = data.runs[index];
              var row = document.createElement("tr");
              row.className = "fresh";
              cell(row, run.recorded, "/runs/" + encodeURIComponent(run.run_id));
              cell(row, run["function"]);
              cell(row, run.handler);
              cell(row, run.attempt);
              cell(row, run.outcome, null, run["class"]);
              cell(row, run.exit_code);
              cell(row, run.duration);
              cell(row, run.worker);
              cell(row, run.entry, "/runs/" + encodeURIComponent(run.entry));
              body.insertBefore(row, body.firstChild);
            }
            if (data.after) { body.setAttribute("data-after", data.after); }
          }
        })
        .catch(function () {})
        .then(function () { setTimeout(tick, 3000); });
    }
    setTimeout(tick, 3000);
  }

  function pollReplay(facts) {
    var url = facts.getAttribute("data-poll");
    var state = facts.getAttribute("data-state");
    if (state !== "counting" && state !== "adding") { return; }
    function tick() {
      fetch(url, {credentials: "same-origin"})
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (job) {
          if (!job) { return; }
          if (job.state !== state) { window.location.reload(); return; }
          ["read", "entries", "copies", "added"].forEach(function (name) {
            var field = facts.querySelector('[data-field="' + name + '"]');
            if (field) { field.textContent = String(job[name === "copies" ? "copies" : name]); }
          });
          setTimeout(tick, 1000);
        })
        .catch(function () { setTimeout(tick, 3000); });
    }
    setTimeout(tick, 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var runs = document.getElementById("runs");
    if (runs) { pollRuns(runs); }
    var replay = document.getElementById("replay");
    if (replay) { pollReplay(replay); }
    document.addEventListener("click", function (event) {
      var target = event.target;
      if (target && target.getAttribute && target.getAttribute("data-confirm") &&
          !window.confirm(target.getAttribute("data-confirm"))) {
        event.preventDefault();
      }
    });
  });
}());
