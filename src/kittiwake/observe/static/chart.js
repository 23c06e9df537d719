// A small SVG line chart of /api/history's points: a time axis over the last
// hour (or, on a broker up for less, over what it has, five minutes at least),
// a value axis from zero with round ticks, one line per series (a gap where a
// value is null or points are missing), and a hover guide that reads every
// series at the nearest point.

import { h, svg, clear } from "./dom.js";
import { clock, durationShort, rate, duration } from "./format.js";

const HEIGHT = 190;
const MARGIN = { top: 10, right: 14, bottom: 24, left: 50 };
const WINDOW_SECS = 3600;
const MIN_WINDOW_SECS = 300;

// seconds between time ticks: about six across the window
export function timeStep(windowSecs) {
  for (const step of [60, 120, 300, 600, 900]) {
    if (windowSecs / step <= 7) return step;
  }
  return 1800;
}

// the span the time axis shows: the last hour, or less when the history is shorter
export function timeWindow(points, stepSecs) {
  if (!points.length) return WINDOW_SECS;
  const span = points[points.length - 1].t - points[0].t + stepSecs;
  return Math.min(WINDOW_SECS, Math.max(MIN_WINDOW_SECS, Math.ceil(span / 60) * 60));
}

// round tick spacing near range / count: 1, 2, 2.5 or 5 times a power of ten
export function niceStep(range, count) {
  const raw = range / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const factor of [1, 2, 2.5, 5, 10]) {
    if (raw <= factor * power) return factor * power;
  }
  return 10 * power;
}

export function niceTicks(max, count = 4) {
  const step = niceStep(max, count);
  const ticks = [];
  for (let value = 0; value <= max + step * 1e-9; value += step) ticks.push(+value.toPrecision(12));
  if (ticks[ticks.length - 1] < max) ticks.push(+(ticks[ticks.length - 1] + step).toPrecision(12));
  return ticks;
}

// [[t, value], ...] runs without nulls and without holes longer than two steps
export function segments(points, key, stepSecs) {
  const runs = [];
  let run = [];
  let last = null;
  for (const point of points) {
    const value = point[key];
    const hole = last !== null && point.t - last > stepSecs * 2.5;
    if (value === null || value === undefined || hole) {
      if (run.length) runs.push(run);
      run = [];
    }
    if (value !== null && value !== undefined) run.push([point.t, value]);
    last = point.t;
  }
  if (run.length) runs.push(run);
  return runs;
}

export class LineChart {
  // series: [{key, label, tone, dashed, area}]; unit: "rate" (per second) or "secs"
  constructor({ testid, title, series, unit }) {
    this.series = series;
    this.unit = unit;
    this.points = [];
    this.stepSecs = 10;
    this.windowSecs = WINDOW_SECS;
    this.hidden = new Set();
    this.host = h("div", { class: "chart-plot" });
    this.tooltip = h("div", { class: "chart-tooltip", hidden: true });
    this.legend = h("div", { class: "chart-legend" }, series.map((item) => this.legendItem(item)));
    this.span = h("span", { class: "chart-span" }, "last hour");
    this.element = h("figure", { class: "chart", testid },
      h("figcaption", { class: "chart-head" }, h("span", { class: "chart-title" }, title), this.span, this.legend),
      h("div", { class: "chart-frame" }, this.host, this.tooltip));
    this.resize = new ResizeObserver(() => this.render());
    this.resize.observe(this.host);
  }

  legendItem(item) {
    const button = h("button", {
      type: "button",
      class: `legend-item tone-${item.tone}${item.dashed ? " dashed" : ""}`,
      "aria-pressed": "true",
      dataset: { series: item.key },
      onclick: () => {
        if (this.hidden.has(item.key)) this.hidden.delete(item.key);
        else this.hidden.add(item.key);
        button.setAttribute("aria-pressed", String(!this.hidden.has(item.key)));
        this.render();
      },
    }, h("span", { class: "swatch" }), item.label);
    return button;
  }

  update(points, stepSecs = 10) {
    this.points = points;
    this.stepSecs = stepSecs;
    this.windowSecs = timeWindow(points, stepSecs);
    this.span.textContent = this.windowSecs >= WINDOW_SECS ? "last hour" : `last ${Math.round(this.windowSecs / 60)} min`;
    this.render();
  }

  destroy() {
    this.resize.disconnect();
  }

  format(value) {
    return this.unit === "rate" ? `${rate(value)}/s` : duration(value);
  }

  axisLabel(value) {
    return this.unit === "rate" ? rate(value) : durationShort(value);
  }

  render() {
    const width = Math.max(this.host.clientWidth, 320);
    const innerWidth = width - MARGIN.left - MARGIN.right;
    const innerHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
    const points = this.points;
    const end = points.length ? points[points.length - 1].t : Math.floor(Date.now() / 1000);
    const start = end - this.windowSecs;
    const shown = this.series.filter((item) => !this.hidden.has(item.key));
    const visible = points.filter((point) => point.t >= start);
    let max = 0;
    for (const point of visible) {
      for (const item of shown) {
        const value = point[item.key];
        if (value !== null && value !== undefined && value > max) max = value;
      }
    }
    if (max <= 0) max = this.unit === "rate" ? 1 : 0.1;
    const ticks = niceTicks(max);
    const top = ticks[ticks.length - 1];
    const x = (t) => MARGIN.left + ((t - start) / this.windowSecs) * innerWidth;
    const y = (value) => MARGIN.top + innerHeight - (value / top) * innerHeight;

    const grid = ticks.map((value) => svg("g", { class: "tick" },
      svg("line", { class: "grid", x1: MARGIN.left, x2: width - MARGIN.right, y1: y(value), y2: y(value) }),
      svg("text", { class: "axis-label", x: MARGIN.left - 8, y: y(value), "text-anchor": "end", "dominant-baseline": "middle" },
        this.axisLabel(value))));
    const timeTicks = [];
    const every = timeStep(this.windowSecs);
    for (let t = Math.ceil(start / every) * every; t <= end; t += every) {
      timeTicks.push(svg("g", { class: "tick" },
        svg("line", { class: "grid grid-x", x1: x(t), x2: x(t), y1: MARGIN.top, y2: MARGIN.top + innerHeight }),
        svg("text", { class: "axis-label", x: x(t), y: HEIGHT - 6, "text-anchor": "middle" }, clock(t))));
    }
    const lines = shown.map((item) => {
      const runs = segments(visible, item.key, this.stepSecs);
      const line = runs.map((run) => run.map(([t, value], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(value).toFixed(1)}`).join("")).join("");
      const area = item.area ? runs.map((run) => {
        const path = run.map(([t, value], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(value).toFixed(1)}`).join("");
        return `${path}L${x(run[run.length - 1][0]).toFixed(1)},${y(0)}L${x(run[0][0]).toFixed(1)},${y(0)}Z`;
      }).join("") : "";
      return svg("g", { class: `series tone-${item.tone}${item.dashed ? " dashed" : ""}`, dataset: { series: item.key } },
        area ? svg("path", { class: "area", d: area }) : null,
        svg("path", { class: "line", d: line }));
    });
    const guide = svg("g", { class: "guide", visibility: "hidden" },
      svg("line", { class: "guide-line", y1: MARGIN.top, y2: MARGIN.top + innerHeight }));
    const overlay = svg("rect", {
      class: "overlay", x: MARGIN.left, y: MARGIN.top, width: innerWidth, height: innerHeight,
    });
    const chart = svg("svg", {
      class: "chart-svg", width, height: HEIGHT, viewBox: `0 0 ${width} ${HEIGHT}`, role: "img",
      "aria-label": this.series.map((item) => item.label).join(", "),
    },
    svg("line", { class: "axis", x1: MARGIN.left, x2: width - MARGIN.right, y1: y(0), y2: y(0) }),
    grid, timeTicks, lines, guide, overlay);
    clear(this.host, chart);
    if (!visible.length) {
      this.host.append(h("div", { class: "chart-empty" }, "No history yet: a point arrives every 10 seconds."));
    }
    overlay.addEventListener("mousemove", (event) => this.hover(event, chart, guide, visible, shown, x, y));
    overlay.addEventListener("mouseleave", () => {
      guide.setAttribute("visibility", "hidden");
      this.tooltip.hidden = true;
    });
  }

  hover(event, chart, guide, visible, shown, x, y) {
    if (!visible.length) return;
    const box = chart.getBoundingClientRect();
    const mouseX = event.clientX - box.left;
    let nearest = visible[0];
    for (const point of visible) {
      if (Math.abs(x(point.t) - mouseX) < Math.abs(x(nearest.t) - mouseX)) nearest = point;
    }
    const at = x(nearest.t);
    guide.setAttribute("visibility", "visible");
    const line = guide.querySelector("line");
    line.setAttribute("x1", at);
    line.setAttribute("x2", at);
    guide.querySelectorAll("circle").forEach((dot) => dot.remove());
    for (const item of shown) {
      const value = nearest[item.key];
      if (value === null || value === undefined) continue;
      guide.append(svg("circle", { class: `dot tone-${item.tone}`, cx: at, cy: y(value), r: 3.5 }));
    }
    clear(this.tooltip,
      h("div", { class: "tooltip-time" }, clock(nearest.t) + ":" + String(new Date(nearest.t * 1000).getSeconds()).padStart(2, "0")),
      ...shown.map((item) => h("div", { class: `tooltip-row tone-${item.tone}` },
        h("span", { class: "swatch" }), h("span", { class: "tooltip-label" }, item.label),
        h("span", { class: "tooltip-value" }, this.format(nearest[item.key])))),
    );
    this.tooltip.hidden = false;
    const left = at + 14 + 180 > box.width ? at - 14 - this.tooltip.offsetWidth : at + 14;
    this.tooltip.style.left = `${Math.max(0, left)}px`;
    this.tooltip.style.top = `${MARGIN.top}px`;
  }
}

// The two charts every history view shows.
export function throughputChart() {
  return new LineChart({
    testid: "chart-throughput",
    title: "Throughput",
    unit: "rate",
    series: [
      { key: "enqueued", label: "Enqueued", tone: "blue", area: true },
      { key: "dequeued", label: "Dequeued", tone: "green" },
      { key: "dead_lettered", label: "Dead-lettered", tone: "red" },
    ],
  });
}

export function latencyChart() {
  return new LineChart({
    testid: "chart-latency",
    title: "Latency",
    unit: "secs",
    series: [
      { key: "wait_p50", label: "Wait p50", tone: "violet" },
      { key: "wait_p95", label: "Wait p95", tone: "violet", dashed: true },
      { key: "run_p50", label: "Run p50", tone: "amber" },
      { key: "run_p95", label: "Run p95", tone: "amber", dashed: true },
    ],
  });
}
