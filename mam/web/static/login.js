// The login page: the token posted by script, so that the request carries the page's Origin (a plain form's POST
// says `Origin: null` under `Referrer-Policy: no-referrer`, which the server refuses as cross-origin); the reason
// of a refusal said under the field. Without script the form still posts, and POST /login sends it back here
// with ?failed=1 on a wrong token.
"use strict";

function fail(text) {
  const p = document.getElementById("failed");
  p.textContent = text;
  p.hidden = false;
}

async function logIn(event) {
  event.preventDefault();
  const form = event.target;
  const button = form.querySelector("button");
  button.disabled = true;
  try {
    const response = await fetch("/login", {
      method: "POST", credentials: "same-origin", headers: { Accept: "application/json" },
      body: new URLSearchParams(new FormData(form)),
    });
    if (response.ok) {
      location.assign("/");
      return;
    }
    let doc = null;
    try { doc = await response.json(); } catch { doc = null; }
    fail(response.status === 401
      ? "Wrong token. Too many failures lock this address for a while."
      : (doc && doc.error) || `${response.status} ${response.statusText}`);
  } catch (err) {
    fail(`cannot reach mam serve: ${err.message}`);
  } finally {
    button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  if (new URLSearchParams(location.search).has("failed")) fail(document.getElementById("failed").textContent);
  document.querySelector("form").addEventListener("submit", logIn);
});
