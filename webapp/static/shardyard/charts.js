// Draws every <div class="chart" data-figure="ID"> from the JSON in <script id="ID">.
// The figures come from webapp/dashboard/charts.py; this file only hands them to plotly.
"use strict";
(function () {
  const config = { responsive: true, displaylogo: false };
  function draw(div, figure) {
    window.Plotly.react(div, figure.data, figure.layout, config);
  }
  function drawAll(root) {
    (root || document).querySelectorAll("div.chart[data-figure]").forEach(function (div) {
      const script = document.getElementById(div.dataset.figure);
      if (script) draw(div, JSON.parse(script.textContent));
    });
  }
  window.shardyardCharts = { draw: draw, drawAll: drawAll };
  document.addEventListener("DOMContentLoaded", function () { drawAll(); });
})();
