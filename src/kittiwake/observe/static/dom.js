// Building the page's elements. Everything shown comes from queues, tasks and
// workers that anyone may name, so text is always set as text (never HTML).

const SVG_NS = "http://www.w3.org/2000/svg";

function build(element, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") element.setAttribute("class", value);
    else if (key === "testid") element.dataset.testid = value;
    else if (key === "dataset") Object.assign(element.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") element.addEventListener(key.slice(2), value);
    else if (key === "text") element.textContent = value;
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// h("a", {href: "#/x", class: "link", testid: "nav"}, "text", child, [more])
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

// empty `element`, then append `children` (nulls and falses are skipped)
export function clear(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

// A panel: a titled card with optional tools on the right of its title.
export function panel({ title, testid, tools, note }, ...body) {
  return h(
    "section",
    { class: "panel", testid },
    h("div", { class: "panel-head" },
      h("h2", { class: "panel-title" }, title),
      note ? h("span", { class: "panel-note" }, note) : null,
      h("div", { class: "panel-tools" }, tools || [])),
    h("div", { class: "panel-body" }, body),
  );
}

export function badge(text, tone, testid) {
  return h("span", { class: `badge badge-${tone || "neutral"}`, testid }, text);
}

export function errorBox(error, testid = "error") {
  const message = error && error.message ? error.message : String(error);
  const code = error && error.code ? error.code : null;
  return h("div", { class: "error-box", role: "alert", testid },
    code ? h("span", { class: "error-code" }, code) : null, message);
}

export function emptyRow(columns, text, testid = "empty") {
  return h("tr", { class: "empty-row", testid }, h("td", { colspan: columns }, text));
}
