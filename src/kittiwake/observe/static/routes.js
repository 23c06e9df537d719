// Hash routes: "#/queue/a%2Fb?tab=dead" names a view, its argument and its parameters.

import { queryString } from "./api.js";

// the route of a hash: "#/queue/a%2Fb?tab=dead" → {name: "queue", arg: "a/b", params: {tab: "dead"}}
export function parseRoute(hash, views) {
  const text = hash.replace(/^#\/?/, "");
  const mark = text.indexOf("?");
  const path = mark < 0 ? text : text.slice(0, mark);
  const search = mark < 0 ? "" : text.slice(mark + 1);
  const [name, ...rest] = path.split("/");
  const params = Object.fromEntries(new URLSearchParams(search || ""));
  let arg = null;
  if (rest.length) {
    try {
      arg = decodeURIComponent(rest.join("/"));
    } catch {
      arg = rest.join("/");
    }
  }
  return views[name] ? { name, arg, params } : { name: "queues", arg: null, params: {} };
}

export function routeHash(name, arg, params) {
  return `#/${name}${arg !== null && arg !== undefined ? `/${encodeURIComponent(arg)}` : ""}${queryString(params)}`;
}
