// The login form, shown when the broker has users and this browser has no session.
//
// The token is sent once, to POST /api/session, which answers with an
// HttpOnly cookie; the page never keeps the token.

import { postJson } from "./api.js";
import { h, clear, errorBox } from "./dom.js";

export function showLogin(main, { message, done }) {
  const user = h("input", {
    id: "login-user", name: "user", autocomplete: "username", required: true, testid: "login-user",
  });
  const token = h("input", {
    id: "login-token", name: "token", type: "password", autocomplete: "current-password", required: true,
    testid: "login-token",
  });
  const submit = h("button", { type: "submit", class: "button button-primary", testid: "login-submit" }, "Log in");
  const feedback = h("div", { class: "login-feedback" }, message ? h("p", { class: "login-message" }, message) : null);
  const form = h("form", { class: "login-form", testid: "login-form", novalidate: true },
    h("h1", {}, "Log in"),
    h("p", { class: "muted" }, "This broker has users. Log in with a user name and its token."),
    h("label", { for: "login-user" }, "User"), user,
    h("label", { for: "login-token" }, "Token"), token,
    feedback,
    submit);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!user.value || !token.value) {
      clear(feedback, errorBox({ message: "Enter a user and a token." }, "login-error"));
      return;
    }
    submit.disabled = true;
    try {
      const session = await postJson("/api/session", { user: user.value, token: token.value });
      token.value = "";
      done(session);
    } catch (error) {
      clear(feedback, errorBox(error, "login-error"));
      token.select();
    } finally {
      submit.disabled = false;
    }
  });
  clear(main, h("div", { class: "login-page" }, form));
  user.focus();
}
