// oaishim probe report: the summary is computed here from the run's own data (embedded below as
// JSON), the same way results.json computes it: checks passed / checks run (pass + fail) per
// endpoint, tenths rounded half up. Also: a filter that shows failing cases only.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("probe-data").textContent);
  var labels = Object.keys(data.sides);

  function score(side) {
    var total = { passed: 0, run: 0 };
    var byEndpoint = {};
    side.cases.forEach(function (c) {
      c.checks.forEach(function (check) {
        if (check.outcome !== "pass" && check.outcome !== "fail") return;
        var entry = byEndpoint[check.endpoint] || (byEndpoint[check.endpoint] = { passed: 0, run: 0 });
        entry.run += 1;
        total.run += 1;
        if (check.outcome === "pass") {
          entry.passed += 1;
          total.passed += 1;
        }
      });
    });
    return { total: total, byEndpoint: byEndpoint };
  }

  function format(entry) {
    if (!entry || !entry.run) return "n/a (0 checks)";
    var tenths = Math.floor((2000 * entry.passed + entry.run) / (2 * entry.run));
    return (tenths / 10).toFixed(1) + "% (" + entry.passed + "/" + entry.run + ")";
  }

  function cell(tag, text, attrs) {
    var el = document.createElement(tag);
    el.textContent = text;
    Object.keys(attrs || {}).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    return el;
  }

  var scores = {};
  var endpoints = {};
  labels.forEach(function (label) {
    scores[label] = score(data.sides[label]);
    Object.keys(scores[label].byEndpoint).forEach(function (ep) { endpoints[ep] = true; });
  });
  var body = document.getElementById("score-body");
  var rows = [["total"]].concat(Object.keys(endpoints).sort().map(function (ep) { return [ep]; }));
  rows.forEach(function (row) {
    var endpoint = row[0];
    var tr = document.createElement("tr");
    tr.appendChild(cell("th", endpoint));
    labels.forEach(function (label) {
      var entry = endpoint === "total" ? scores[label].total : scores[label].byEndpoint[endpoint];
      var attrs = { "class": "score", "data-side": label, "data-endpoint": endpoint };
      var td = cell("td", format(entry), attrs);
      if (entry && entry.run) td.classList.add(entry.passed === entry.run ? "good" : "bad");
      tr.appendChild(td);
    });
    body.appendChild(tr);
  });
  labels.forEach(function (label) {
    var side = data.sides[label];
    var counts = { pass: 0, fail: 0, skip: 0 };
    side.cases.forEach(function (c) { counts[c.outcome] += 1; });
    var el = document.querySelector('.side-outcomes[data-side="' + label + '"]');
    if (el) el.textContent = counts.pass + " passed, " + counts.fail + " failed, " + counts.skip + " skipped";
  });
  document.getElementById("summary").setAttribute("data-computed", "yes");

  var toggle = document.getElementById("failing-only");
  toggle.addEventListener("change", function () {
    document.body.classList.toggle("failing-only", toggle.checked);
  });
})();
