// The Charts view: the broker's last hour, one point per 10 seconds, larger
// and with every series /api/history has.

import { h } from "./dom.js";
import { LineChart, throughputChart, latencyChart } from "./chart.js";

export class ChartsView {
  constructor(app) {
    this.title = "Charts";
    this.charts = [
      throughputChart(),
      new LineChart({
        testid: "chart-leases",
        title: "Leases",
        unit: "rate",
        series: [
          { key: "leased", label: "Leased", tone: "blue", area: true },
          { key: "released", label: "Released", tone: "amber" },
          { key: "expired", label: "Expired", tone: "red" },
        ],
      }),
      latencyChart(),
      new LineChart({
        testid: "chart-commit",
        title: "Group commit",
        unit: "secs",
        series: [
          { key: "commit_p50", label: "Commit p50", tone: "teal" },
          { key: "commit_p95", label: "Commit p95", tone: "teal", dashed: true },
        ],
      }),
    ];
    this.note = h("p", { class: "muted small", testid: "charts-note" });
    this.element = h("div", { class: "view", testid: "view-charts" },
      h("div", { class: "chart-grid" }, this.charts.map((chart) => h("div", { class: "panel chart-panel" }, chart.element))),
      this.note);
    this.unsubscribe = app.history.subscribe((history) => {
      this.note.textContent = history.available
        ? "The last hour, one point per 10 seconds; the stream adds each new point as it closes."
        : "This broker has no history (GET /api/history failed).";
      for (const chart of this.charts) chart.update(history.points, history.stepSecs);
    });
  }

  streamQuery() {
    return { view: "overview" };
  }

  destroy() {
    this.unsubscribe();
    for (const chart of this.charts) chart.destroy();
  }
}
