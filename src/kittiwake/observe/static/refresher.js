// Views the stream has no event for (workers, jobs, flow runs) fetch again
// when the broker's overview changes, at most once every few seconds: they
// follow what happens without polling an idle broker.

import { getJson } from "./api.js";
import { h, clear, errorBox, emptyRow } from "./dom.js";

const PAUSE_MS = 3000;

export class Refresher {
  constructor(app, load, pauseMs = PAUSE_MS) {
    this.load = load;
    this.pauseMs = pauseMs;
    this.last = 0;
    this.timer = null;
    this.unsubscribe = app.onOverview(() => this.soon());
  }

  soon() {
    if (this.timer) return;
    const wait = Math.max(0, this.last + this.pauseMs - Date.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      this.now();
    }, wait);
  }

  now() {
    this.last = Date.now();
    this.load();
  }

  destroy() {
    clearTimeout(this.timer);
    this.unsubscribe();
  }
}

// What the broker left out of a list: records that do not decode (`skipped`), and records it did
// not look at in full because they name more than one request reads (`truncated`).
function listNote(answer) {
  const parts = [];
  if (answer.skipped) parts.push(`${answer.skipped} malformed record(s) left out`);
  if (answer.truncated) parts.push("some not looked at in full (state unknown): they name more than one request reads");
  return parts.length ? h("div", { class: "muted small", testid: "list-note" }, parts.join("; ")) : null;
}

// A list view's load (workers, jobs, flow runs): the answer to the latest request wins (an older one
// arriving late is dropped); an error shows above the table, which says there is nothing while
// nothing was ever loaded, and so does what the broker left out. `key` names both the answer's
// list and the view's field.
export async function loadList(view, path, params, key, errorTestid, columns) {
  const sequence = ++view.sequence;
  try {
    const answer = await getJson(path, params);
    if (sequence !== view.sequence) return;
    view[key] = answer[key] || [];
    clear(view.error, listNote(answer));
    view.render();
  } catch (error) {
    if (sequence !== view.sequence) return;
    clear(view.error, errorBox(error, errorTestid));
    if (view[key] === null) clear(view.body, emptyRow(columns, "Nothing to show."));
  }
}
