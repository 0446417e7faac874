// A stand-in for the admin frontend: calls the API with the browser's own fetch and cookies,
// then writes what it could read into #results (JSON) for tests/test_browser.py.
//
// Query parameters: api (the API's origin), email, password, region (slug), name (new name),
// steps (comma-separated, run in order), next (a page to continue to, handed these results).
"use strict";

const params = new URLSearchParams(location.search);
const api = params.get("api");
const steps = (params.get("steps") || "login,me,edit,logout,me").split(",");
const previous = JSON.parse(params.get("previous") || "[]");
const results = [];

function show(result) {
  const row = document.createElement("tr");
  const readable = result.error === undefined && result.type !== "opaque";
  const outcome = result.error !== undefined
    ? result.error
    : `${result.type} ${result.status}`;
  const cells = [
    result.page,
    result.step,
    `${result.method} ${result.path}`,
    outcome,
    result.body === undefined ? "" : JSON.stringify(result.body),
  ];
  for (const text of cells) {
    const cell = document.createElement("td");
    cell.textContent = text;
    row.appendChild(cell);
  }
  row.children[3].className = readable ? "ok" : "refused";
  document.getElementById("steps").appendChild(row);
}

async function call(step, method, path, init = {}) {
  const result = { page: location.origin, step, method, path };
  try {
    const response = await fetch(api + path, { method, credentials: "include", ...init });
    result.type = response.type; // "cors" when readable, "opaque" for no-cors
    result.status = response.status;
    // Headers the API exposes to other origins (Access-Control-Expose-Headers).
    result.requestId = response.headers.get("X-Request-ID");
    result.rateLimit = response.headers.get("X-RateLimit-Limit");
    const text = await response.text();
    try {
      result.body = text ? JSON.parse(text) : null;
    } catch {
      result.body = text;
    }
  } catch (error) {
    result.error = String(error); // what a page sees when CORS hides the answer
  }
  results.push(result);
  show(result);
}

function json(body, headers = {}) {
  return { headers: { "Content-Type": "application/json", ...headers }, body: JSON.stringify(body) };
}

const actions = {
  login: () =>
    call("login", "POST", "/auth/login",
         json({ email: params.get("email"), password: params.get("password") })),
  me: () => call("me", "GET", "/me/"), // a "simple" request: sent without a preflight
  // PUT /regions/slug/:slug (the contract's region update); sends a request id of its own.
  edit: () =>
    call("edit", "PUT", `/regions/slug/${params.get("region")}`,
         json({ name: params.get("name") }, { "X-Request-ID": "browser-edit" })),
  logout: () => call("logout", "POST", "/auth/logout"),
  // A public vote form: JSON (so a preflight), no credentials; any site may do this.
  vote: () =>
    call("vote", "POST", `/locations/${params.get("location")}/votes/submit/btoc`, {
      credentials: "omit",
      ...json({
        yourName: "Ann", yourEmail: "ann@example.org", yourPhone: "+44 1",
        businessName: "Bakery", businessBranch: "Quay", voteBody: "Good bread.",
      }),
    }),
  // A "simple" request: no preflight, so it reaches the server whatever CORS says.
  forge: () =>
    call("forge", "POST", "/regions/", {
      mode: "no-cors",
      headers: { "Content-Type": "text/plain" },
      body: JSON.stringify({ name: "Forged" }),
    }),
};

async function main() {
  document.getElementById("origin").textContent = location.origin;
  document.getElementById("api").textContent = api;
  previous.forEach(show);
  for (const step of steps) {
    await actions[step]();
  }
  document.getElementById("cookies").textContent = JSON.stringify(document.cookie);
  const report = { origin: location.origin, cookies: document.cookie, previous, results };
  const next = params.get("next");
  if (next) {
    const url = new URL(next);
    url.searchParams.set("previous", JSON.stringify(previous.concat(results)));
    location.replace(url);
    return;
  }
  document.getElementById("results").textContent = JSON.stringify(report);
  document.title = "done";
}

main().catch((error) => {
  document.getElementById("results").textContent = JSON.stringify({ crashed: String(error) });
  document.title = "done";
});
