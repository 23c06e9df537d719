// The Queues view: throughput and latency charts over the last hour, and the
// queue table. Sorting, filtering and paging are the server's (/api/queues
// parameters, kept in the address so a view can be linked and reloaded); the
// stream pushes the same page again whenever it changes.

import { getJson } from "./api.js";
import { h, clear, panel, errorBox, emptyRow } from "./dom.js";
import { count, rate, duration } from "./format.js";
import { throughputChart, latencyChart } from "./chart.js";
import { routeHash } from "./routes.js";

export const COLUMNS = [
  { key: "queue", sort: "name", label: "Queue", numeric: false },
  { key: "size", sort: "size", label: "Size" },
  { key: "available", sort: "available", label: "Available" },
  { key: "leased", sort: "leased", label: "Leased" },
  { key: "blocked", sort: "blocked", label: "Blocked" },
  { key: "dead", sort: "dead", label: "Dead" },
  { key: "enqueue_rate", sort: "enqueue_rate", label: "Enqueued /s", format: rate },
  { key: "dequeue_rate", sort: "dequeue_rate", label: "Dequeued /s", format: rate },
  { key: "oldest_age_secs", sort: "oldest_age", label: "Oldest", format: duration },
];
const LIMITS = [25, 50, 100, 200];
const DEFAULT_LIMIT = 50;
const FILTER_PAUSE_MS = 250;

function defaultOrder(sort) {
  return sort === "name" ? "asc" : "desc";
}

// the view's parameters from the address, with the server's defaults filled in
export function queueParams(params) {
  const sort = COLUMNS.some((column) => column.sort === params.sort) ? params.sort : "name";
  const order = params.order === "asc" || params.order === "desc" ? params.order : defaultOrder(sort);
  const limit = LIMITS.includes(Number(params.limit)) ? Number(params.limit) : DEFAULT_LIMIT;
  const offset = Math.max(0, Math.floor(Number(params.offset) || 0));
  return { filter: params.filter || "", sort, order, offset, limit, dead: params.dead === "1" ? "1" : "" };
}

export class QueuesView {
  constructor(app, route) {
    this.app = app;
    this.title = "Queues";
    this.params = queueParams(route.params);
    this.answer = null;
    this.refused = false; // the broker refused these parameters (a bad glob): no stream for them
    this.sequence = 0;
    this.filterTimer = null;
    this.charts = [throughputChart(), latencyChart()];
    this.unsubscribe = app.history.subscribe((history) => {
      for (const chart of this.charts) chart.update(history.points, history.stepSecs);
    });

    this.filter = h("input", {
      type: "search", class: "input filter", placeholder: "Filter by name or glob (orders.*)",
      value: this.params.filter, testid: "queues-filter", "aria-label": "Filter queues",
    });
    this.filter.addEventListener("input", () => {
      clearTimeout(this.filterTimer);
      this.filterTimer = setTimeout(() => this.go({ filter: this.filter.value.trim(), offset: 0 }, true), FILTER_PAUSE_MS);
    });
    this.deadToggle = h("input", { type: "checkbox", testid: "queues-show-dead" });
    this.deadToggle.checked = this.params.dead === "1";
    this.deadToggle.addEventListener("change", () => this.go({ dead: this.deadToggle.checked ? "1" : "", offset: 0 }));
    this.limitSelect = h("select", { class: "input select", testid: "queues-limit", "aria-label": "Rows per page" },
      LIMITS.map((limit) => h("option", { value: limit }, `${limit} rows`)));
    this.limitSelect.value = String(this.params.limit);
    this.limitSelect.addEventListener("change", () => this.go({ limit: Number(this.limitSelect.value), offset: 0 }));

    this.head = h("tr");
    this.body = h("tbody", { testid: "queues-body" });
    this.range = h("span", { class: "pager-range", testid: "queues-range" });
    this.previous = h("button", { type: "button", class: "button", testid: "queues-prev", onclick: () => this.page(-1) }, "‹ Previous");
    this.next = h("button", { type: "button", class: "button", testid: "queues-next", onclick: () => this.page(1) }, "Next ›");
    this.error = h("div", { class: "inline-error" });
    this.updated = h("span", { class: "panel-note", testid: "queues-updated" });

    this.element = h("div", { class: "view view-queues", testid: "view-queues" },
      h("div", { class: "chart-row" }, this.charts.map((chart) => h("div", { class: "panel chart-panel" }, chart.element))),
      panel({
        title: "Queues",
        testid: "queues-panel",
        tools: [
          h("label", { class: "toggle" }, this.deadToggle, "Dead-letter queues as rows"),
          this.filter,
        ],
      },
      this.error,
      h("div", { class: "table-wrap" },
        h("table", { class: "table", testid: "queues-table" }, h("thead", {}, this.head), this.body)),
      h("div", { class: "pager" }, this.range, h("span", { class: "pager-gap" }), this.limitSelect, this.previous, this.next)));
    this.renderHead();
    this.body.append(emptyRow(COLUMNS.length, "Loading…", "queues-loading"));
    this.load();
  }

  streamQuery() {
    return this.refused ? { view: "overview" } : { view: "queues", ...this.serverParams() };
  }

  serverParams() {
    const { filter, sort, order, offset, limit, dead } = this.params;
    return { filter, sort, order, offset, limit, dead };
  }

  // a new address for this view: the changed parameters merged in
  go(changes, replace = false) {
    const next = { ...this.params, ...changes };
    const params = {
      filter: next.filter,
      sort: next.sort === "name" ? "" : next.sort,
      order: next.order === defaultOrder(next.sort) ? "" : next.order,
      offset: next.offset || "",
      limit: next.limit === DEFAULT_LIMIT ? "" : next.limit,
      dead: next.dead,
    };
    this.app.navigate(routeHash("queues", null, params), { replace });
  }

  update(route) {
    const params = queueParams(route.params);
    if (JSON.stringify(params) === JSON.stringify(this.params)) return;
    this.params = params;
    this.refused = false;
    if (document.activeElement !== this.filter) this.filter.value = params.filter;
    this.deadToggle.checked = params.dead === "1";
    this.limitSelect.value = String(params.limit);
    this.renderHead();
    this.load();
  }

  refresh() {
    this.load();
  }

  sortBy(sort) {
    const order = sort === this.params.sort ? (this.params.order === "asc" ? "desc" : "asc") : defaultOrder(sort);
    this.go({ sort, order, offset: 0 });
  }

  page(direction) {
    const offset = Math.max(0, this.params.offset + direction * this.params.limit);
    this.go({ offset });
  }

  async load() {
    const sequence = ++this.sequence;
    try {
      const answer = await getJson("/api/queues", this.serverParams());
      if (sequence === this.sequence) this.render(answer);
    } catch (error) {
      if (sequence !== this.sequence) return;
      clear(this.error, errorBox(error, "queues-error"));
      if (error.status === 400) {
        clear(this.body, emptyRow(COLUMNS.length, "Nothing to show.", "queues-refused"));
        this.range.textContent = "";
      }
      if (error.status === 400 && !this.refused) {
        this.refused = true;
        this.app.openStream();
      }
    }
  }

  onQueues(answer) {
    // the stream was opened with this view's parameters; a fetch still under way is older
    this.sequence += 1;
    this.render(answer);
  }

  renderHead() {
    clear(this.head, ...COLUMNS.map((column) => {
      const active = this.params.sort === column.sort;
      const direction = active ? (this.params.order === "asc" ? "ascending" : "descending") : "none";
      return h("th", { class: column.numeric === false ? "" : "num", "aria-sort": direction, scope: "col" },
        h("button", {
          type: "button", class: `sort${active ? " active" : ""}`, testid: `sort-${column.sort}`,
          onclick: () => this.sortBy(column.sort),
        }, column.label, h("span", { class: "sort-arrow", "aria-hidden": "true" },
          active ? (this.params.order === "asc" ? "▲" : "▼") : "")));
    }));
  }

  render(answer) {
    this.answer = answer;
    clear(this.error);
    const rows = answer.queues || [];
    clear(this.body);
    if (!rows.length) {
      const text = this.params.filter ? `No queue matches “${this.params.filter}”.` : "No queues yet.";
      this.body.append(emptyRow(COLUMNS.length, text, "queues-empty"));
    }
    for (const row of rows) {
      this.body.append(h("tr", { testid: "queue-row", dataset: { queue: row.queue } },
        COLUMNS.map((column) => this.cell(column, row))));
    }
    const total = answer.total || 0;
    const first = rows.length ? answer.offset + 1 : 0;
    const last = answer.offset + rows.length;
    this.range.textContent = total ? `${count(first)}–${count(last)} of ${count(total)}` : "0 queues";
    this.previous.disabled = answer.offset <= 0;
    this.next.disabled = last >= total;
  }

  cell(column, row) {
    const value = row[column.key];
    if (column.key === "queue") {
      return h("td", { class: "name", testid: "cell-queue" },
        h("a", { href: routeHash("queue", value, {}), class: "link" }, value));
    }
    const text = (column.format || count)(value);
    let tone = value === 0 || value === null || value === undefined ? "zero" : "";
    if (column.key === "dead" && value > 0) tone = "danger";
    return h("td", { class: `num ${tone}`, testid: `cell-${column.key}`, dataset: { value: value ?? "" } },
      column.key === "dead" && value > 0 ? h("span", { class: "pill pill-red" }, text) : text);
  }

  destroy() {
    clearTimeout(this.filterTimer);
    this.unsubscribe();
    for (const chart of this.charts) chart.destroy();
  }
}
