// The overview strip under the top bar: the broker's totals and its workers.

import { h } from "./dom.js";
import { count, percent } from "./format.js";

function card(key, label, value, { tone, aside, meter } = {}) {
  return h("div", { class: `stat-card${tone ? ` tone-${tone}` : ""}`, testid: `overview-${key}` },
    h("div", { class: "stat-label" }, label),
    h("div", { class: "stat-value" }, h("span", { testid: `overview-${key}-value` }, value),
      aside ? h("span", { class: "stat-aside" }, aside) : null),
    meter !== undefined ? meterBar(meter) : null);
}

export function meterBar(fraction) {
  const bar = h("span", { class: "meter-fill" });
  bar.style.width = `${Math.max(0, Math.min(1, fraction || 0)) * 100}%`;
  return h("span", { class: "meter" }, bar);
}

export function renderOverview(strip, overview) {
  const totals = overview.totals || {};
  const workers = overview.workers || {};
  const busy = workers.slots ? workers.busy / workers.slots : 0;
  strip.replaceChildren(h("div", { class: "overview-inner" },
    card("queues", "Queues", count(totals.queues)),
    card("tasks", "Tasks", count(totals.tasks)),
    card("available", "Available", count(totals.available)),
    card("leased", "Leased", count(totals.leased)),
    card("blocked", "Blocked", count(totals.blocked)),
    card("dead", "Dead letters", count(totals.dead), { tone: totals.dead ? "red" : null }),
    card("workers", "Workers", count(workers.alive)),
    card("slots", "Busy slots", `${count(workers.busy)} / ${count(workers.slots)}`,
      { meter: busy, aside: workers.slots ? percent(busy) : null }),
  ));
}
