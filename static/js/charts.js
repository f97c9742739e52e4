// Charts from data the page carries in <script type="application/json">: Chart.js, served
// from the portal's own static files. Each <canvas data-chart="kind" data-source="id">
// draws once on load and again after htmx swaps it in.
(function () {
  "use strict";
  var ink = "#343a40", grid = "#e9ecef";
  function fmt(n, digits) {
    return Number(n).toLocaleString(undefined, {minimumFractionDigits: digits, maximumFractionDigits: digits});
  }
  function hours(n) { return fmt(n, Math.abs(n) >= 100 ? 0 : 1) + " h"; }
  var kinds = {
    // Device-hours allocated and used per month (bars, left axis) and the charge (line, right).
    months: function (d) {
      var datasets = [
        {type: "bar", label: "Allocated device-hours", data: d.allocated_h, backgroundColor: "#f08c00", yAxisID: "hours", order: 2},
        {type: "bar", label: "Used device-hours", data: d.used_h, backgroundColor: "#2b8a3e", yAxisID: "hours", order: 2},
        {type: "line", label: "Charged (" + d.currency + ")", data: d.amount, borderColor: "#364fc7", backgroundColor: "#364fc7", yAxisID: "money", tension: 0, order: 1}
      ];
      if (d.budget !== undefined) {
        datasets.push({type: "line", label: "Monthly budget (" + d.currency + ")", data: d.labels.map(function () { return d.budget; }),
          borderColor: "#c92a2a", borderDash: [6, 4], pointRadius: 0, yAxisID: "money", order: 0});
      }
      return {
        data: {labels: d.labels, datasets: datasets},
        options: {
          scales: {
            hours: {position: "left", beginAtZero: true, title: {display: true, text: "device-hours"}, ticks: {callback: function (v) { return hours(v); }}},
            money: {position: "right", beginAtZero: true, grid: {drawOnChartArea: false}, title: {display: true, text: d.currency}, ticks: {callback: function (v) { return fmt(v, 0); }}}
          },
          plugins: {tooltip: {callbacks: {label: function (c) {
            return c.dataset.yAxisID === "money" ? c.dataset.label + ": " + d.currency + " " + fmt(c.parsed.y, 2)
                                                 : c.dataset.label + ": " + hours(c.parsed.y);
          }}}}
        }
      };
    },
    // Each seam's p95 per day, in seconds on a log scale (0.1 s steps beside hours of queue).
    seams: function (d) {
      var colours = ["#f08c00", "#5c7cfa", "#2b8a3e", "#ae3ec9", "#1098ad", "#c92a2a"];
      function secs(v) {
        if (v < 60) { return fmt(v, v < 10 ? 1 : 0) + " s"; }
        if (v < 3600) { return fmt(v / 60, 1) + " min"; }
        return fmt(v / 3600, 1) + " h";
      }
      return {
        data: {labels: d.labels, datasets: d.lines.map(function (line, i) {
          return {type: "line", label: line.label + " (p95)", data: line.p95, spanGaps: false, yAxisID: "seconds",
                  borderColor: colours[i % colours.length], backgroundColor: colours[i % colours.length]};
        })},
        options: {
          scales: {seconds: {type: "logarithmic", position: "left", title: {display: true, text: "p95, seconds (log)"},
                             // Label only round steps: a log axis crowds its in-between ticks.
                             ticks: {autoSkip: true, callback: function (v) {
                               var l = Math.log10(v);
                               return (Math.abs(l - Math.round(l)) < 1e-9 || v === 60 || v === 600 || v === 3600) ? secs(v) : "";
                             }}}},
          plugins: {tooltip: {callbacks: {label: function (c) { return c.dataset.label + ": " + secs(c.parsed.y); }}}}
        }
      };
    },
    // A pool's stranded device-hours per day (bars) and the devices given back that day.
    stranded: function (d) {
      return {
        data: {labels: d.labels, datasets: [
          {type: "bar", label: "Stranded device-hours", data: d.stranded_h, backgroundColor: "#f08c00", yAxisID: "hours"},
          {type: "bar", label: "Devices given back", data: d.given_back, backgroundColor: "#2b8a3e", yAxisID: "devices"}
        ]},
        options: {scales: {
          hours: {position: "left", beginAtZero: true, title: {display: true, text: "device-hours"}, ticks: {callback: function (v) { return hours(v); }}},
          devices: {position: "right", beginAtZero: true, grid: {drawOnChartArea: false}, title: {display: true, text: "devices given back"}, ticks: {precision: 0}}
        }}
      };
    },
    // A queue's waits per day: p50 and p95 in minutes, admissions on the right.
    waits: function (d) {
      return {
        data: {labels: d.labels, datasets: [
          {type: "bar", label: "p95 wait (min)", data: d.p95_min, backgroundColor: "#f08c00", yAxisID: "wait"},
          {type: "bar", label: "p50 wait (min)", data: d.p50_min, backgroundColor: "#5c7cfa", yAxisID: "wait"},
          {type: "line", label: "Admitted jobs", data: d.admitted, borderColor: "#2b8a3e", backgroundColor: "#2b8a3e", yAxisID: "jobs"}
        ]},
        options: {scales: {
          wait: {position: "left", beginAtZero: true, title: {display: true, text: "minutes waited"}},
          jobs: {position: "right", beginAtZero: true, grid: {drawOnChartArea: false}, title: {display: true, text: "jobs admitted"}, ticks: {precision: 0}}
        }}
      };
    }
  };
  function draw(root) {
    if (!window.Chart) { return; }
    (root || document).querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      var source = document.getElementById(canvas.dataset.source);
      var make = kinds[canvas.dataset.chart];
      if (!source || !make) { return; }
      var existing = window.Chart.getChart(canvas);
      if (existing) { existing.destroy(); }
      var spec = make(JSON.parse(source.textContent));
      spec.options.responsive = true;
      spec.options.maintainAspectRatio = false;
      spec.options.animation = false;
      spec.options.interaction = {mode: "index", intersect: false};
      spec.options.plugins = Object.assign({legend: {position: "bottom", labels: {color: ink}}}, spec.options.plugins || {});
      Object.keys(spec.options.scales).forEach(function (k) {
        spec.options.scales[k].ticks = Object.assign({color: ink}, spec.options.scales[k].ticks || {});
        spec.options.scales[k].title.color = ink;
        if (!spec.options.scales[k].grid) { spec.options.scales[k].grid = {color: grid}; }
      });
      new window.Chart(canvas, spec);
      canvas.dataset.drawn = "true";
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSwap", function (e) { draw(e.target); });
})();
