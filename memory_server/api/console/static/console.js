// The console's own script: the copy buttons of a new token, the filters folded on a narrow screen and the
// chart of the status page.
// Loaded from the server like every other asset (the Content-Security-Policy allows no inline script).
(function () {
  "use strict";

  function copyField(button) {
    var field = document.getElementById(button.getAttribute("data-copy"));
    var status = document.getElementById(field.id + "-status");
    function done(text) { if (status) { status.textContent = text; } }
    field.select();
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(field.value).then(
        function () { done("Copied to the clipboard."); },
        function () { done("Selected: press Ctrl+C (or Cmd+C) to copy."); });
    } else {
      done(document.execCommand && document.execCommand("copy") ? "Copied to the clipboard."
        : "Selected: press Ctrl+C (or Cmd+C) to copy.");
    }
  }

  function bindCopy(root) {
    root.querySelectorAll("[data-copy]").forEach(function (button) {
      if (button.dataset.bound) { return; }
      button.dataset.bound = "1";
      button.addEventListener("click", function () { copyField(button); });
    });
  }

  function chart() {
    var el = document.getElementById("occurred-chart");
    if (!el || typeof window.uPlot !== "function") { return; }
    var days = JSON.parse(el.getAttribute("data-days"));
    var counts = JSON.parse(el.getAttribute("data-counts"));
    var xs = days.map(function (day) { return Date.parse(day + "T00:00:00Z") / 1000; });
    var total = counts.reduce(function (sum, n) { return sum + n; }, 0);
    var style = getComputedStyle(document.documentElement);
    var accent = style.getPropertyValue("--accent").trim() || "#2457a6";
    function width() { return Math.max(260, el.clientWidth); }
    // The legend names the day under the pointer and its count; with the pointer elsewhere, the whole span.
    function day(u, ts, sidx, idx) { return idx == null ? days[0] + " to " + days[days.length - 1] : days[idx]; }
    function count(u, n, sidx, idx) { return idx == null ? total + " in all" : n + (n === 1 ? " memory" : " memories"); }
    var plot = new window.uPlot({
      width: width(), height: 220, tzDate: function (ts) { return window.uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); },
      // Half a day either side, so the first and last days' bars show whole.
      scales: { x: { time: true, range: function (u, min, max) { return [min - 43200, max + 43200]; } },
                y: { range: function (u, min, max) { return [0, Math.max(1, max)]; } } },
      series: [{ label: "Day (UTC)", value: day },
               { label: "Occurred", stroke: accent, fill: accent, points: { show: false }, value: count,
                 paths: window.uPlot.paths.bars({ size: [0.8, 24] }) }],
      axes: [{}, { size: 48, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 100000] }],
      legend: { show: true }
    }, [xs, counts], el);
    plot.setLegend({ idx: null });
    window.addEventListener("resize", function () { plot.setSize({ width: width(), height: 220 }); });
  }

  // A narrow screen shows the results first: the filters fold until opened (wide, they stay open).
  function foldNarrow() {
    if (!window.matchMedia("(max-width: 40rem)").matches) { return; }
    document.querySelectorAll("details[data-fold-narrow][open]").forEach(function (details) {
      details.open = false;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    foldNarrow();
    bindCopy(document);
    chart();
  });
  document.addEventListener("htmx:afterSwap", function (event) { bindCopy(event.target); });
})();
