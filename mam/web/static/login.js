// The login page's one job besides its form: say that the last try failed (POST /login sends us back with ?failed=1).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  if (new URLSearchParams(location.search).has("failed")) {
    document.getElementById("failed").hidden = false;
  }
});
