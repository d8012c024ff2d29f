// The sign-in form.

import { call, errorText, setCsrfToken, type SignInAnswer } from "./api";
import { h } from "./dom";
import type { Page } from "./page";

/** signInPage shows the form; done is called with the answer after a successful sign-in. */
export function signInPage(root: HTMLElement, done: (a: SignInAnswer) => void): Page {
  const email = h("input", { id: "signin-email", "data-testid": "signin-email", type: "email", name: "email", autocomplete: "username", required: true });
  const password = h("input", { id: "signin-password", "data-testid": "signin-password", type: "password", name: "password", autocomplete: "current-password", required: true });
  const submit = h("button", { id: "signin-submit", "data-testid": "signin-submit", type: "submit", class: "primary" }, "Sign in");
  const error = h("p", { id: "signin-error", "data-testid": "signin-error", class: "error", role: "alert" });
  const form = h(
    "form",
    { id: "signin-form", class: "card signin" },
    h("h1", {}, "Sign in to Rodon"),
    h("label", { for: "signin-email" }, "Email"),
    email,
    h("label", { for: "signin-password" }, "Password"),
    password,
    submit,
    error,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    submit.disabled = true;
    try {
      const a = await call<SignInAnswer>("POST", "/v1/auth/signin", { email: email.value.trim(), password: password.value });
      setCsrfToken(a.csrf_token);
      password.value = "";
      done(a);
    } catch (err) {
      error.textContent = errorText(err);
      password.select();
    } finally {
      submit.disabled = false;
    }
  });
  root.appendChild(form);
  email.focus();
  return { dispose() {} };
}
