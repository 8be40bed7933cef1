// coplay report: draws every chart of the embedded data with uPlot, against
// iterations or wall time. window.coplayReport.charts lists {key, plot} for tests.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("coplay-data").textContent);
  const report = (window.coplayReport = { charts: [], axis: "iterations" });

  function options(chart, axis, width) {
    const series = [{ label: axis === "iterations" ? "iteration" : "wall time (s)" }];
    for (const s of chart.series) {
      series.push({
        label: s.label,
        stroke: s.color,
        width: s.dash ? 1 : 1.5,
        dash: s.dash ? [5, 5] : undefined,
        spanGaps: true,
        points: { show: !s.dash && s.values.length < 3 },
        value: (u, v) => (v == null ? "-" : v.toPrecision(4)),
      });
    }
    return {
      title: chart.key,
      width: width,
      height: 210,
      series: series,
      scales: { x: { time: false } },
      axes: [{ label: series[0].label }, { size: 60 }],
      legend: { live: true },
    };
  }

  function draw(axis) {
    for (const c of report.charts) c.plot.destroy();
    report.charts = [];
    report.axis = axis;
    const grids = document.querySelectorAll(".grid");
    for (const grid of grids) grid.textContent = "";
    for (const chart of data.charts) {
      const grid = grids[chart.grid];
      const box = document.createElement("div");
      box.className = "chart";
      box.dataset.key = chart.key;
      grid.appendChild(box);
      const tables = chart.series.map((s) => [s[axis], s.values]);
      const joined = uPlot.join(tables);
      const plot = new uPlot(options(chart, axis, 420), joined, box);
      report.charts.push({ key: chart.key, plot: plot });
    }
  }

  for (const input of document.querySelectorAll('input[name="xaxis"]')) {
    input.addEventListener("change", (e) => draw(e.target.value));
  }
  draw("iterations");
})();
