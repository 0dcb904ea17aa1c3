"""The status page served at ``/``: plain HTML and a little JavaScript, no build step.

The page itself holds no data; its script reads ``/api/v1/status`` every second with the
token given in the address (``/#token=...``, kept in the browser's local storage) or typed in
when the API answers 401, and sends pause/resume/cancel to the dump endpoints.
"""

STATUS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dblog</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em;margin:0 0 .6em} h2{font-size:1.05em;margin:1.2em 0 .4em}
table{border-collapse:collapse} td,th{padding:.25em .7em;text-align:left;
border-bottom:1px solid #ddd} .muted{color:#777}
#summary span{margin-right:1.4em} .state-failing,.state-failed{color:#b00}
.state-dumping,.state-running{color:#06c} .bar{width:220px;height:12px;background:#eee;
border-radius:3px;overflow:hidden;display:inline-block;vertical-align:middle}
.fill{height:100%;background:#3a7;width:0} #error{color:#b00}
</style></head><body>
<h1>dblog <span id="instance" class="muted"></span></h1>
<div id="summary"><span>role <b id="role">?</b></span><span>leader <b id="leader">?</b></span>
<span>epoch <b id="epoch">?</b></span><span>lag <b id="lag">?</b></span>
<span>running <b id="running">?</b></span><span>position <b id="position">?</b></span></div>
<p id="error"></p>
<h2>Tables</h2><table id="tables"><thead><tr><th>table</th><th>state</th></tr></thead>
<tbody></tbody></table>
<h2>Dumps</h2><table id="dumps"><thead><tr><th>id</th><th>state</th><th>progress</th>
<th>rows</th><th>table</th><th>ETA</th><th></th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const hash = new URLSearchParams(location.hash.slice(1));
if (hash.get("token")) {
  localStorage.setItem("dblogToken", hash.get("token"));
  history.replaceState(null, "", location.pathname + location.search);  // out of the history
}
function token() { return localStorage.getItem("dblogToken") || ""; }
async function call(method, path) {
  const headers = token() ? {"Authorization": "Bearer " + token()} : {};
  const response = await fetch(path, {method, headers});
  if (response.status === 401) {
    const given = prompt("dblog API token");
    if (given) { localStorage.setItem("dblogToken", given); }
  }
  const body = await response.json();
  if (!response.ok) { throw new Error(body.detail || response.statusText); }
  return body;
}
function cell(row, text, cls) {
  const td = row.insertCell(); td.textContent = text == null ? "" : String(text);
  if (cls) { td.className = cls; } return td;
}
function seconds(s) {
  if (s == null) { return "-"; }
  return s < 90 ? s.toFixed(1) + " s" : (s / 60).toFixed(1) + " min";
}
function button(td, dump, action) {
  const b = document.createElement("button");
  b.textContent = action; b.dataset.action = action; b.dataset.dump = dump.id;
  b.onclick = async () => {
    try { await call("POST", "/api/v1/dumps/" + encodeURIComponent(dump.id) + "/" + action);
          refresh(); }
    catch (e) { document.getElementById("error").textContent = e.message; }
  };
  td.appendChild(b);
}
function dumpRow(body, dump) {
  const row = body.insertRow(); row.dataset.dump = dump.id; row.dataset.state = dump.state;
  cell(row, dump.id); cell(row, dump.state, "state-" + dump.state);
  const bar = document.createElement("div"); bar.className = "bar";
  const fill = document.createElement("div"); fill.className = "fill";
  const pct = dump.percent == null ? 0 : dump.percent;
  fill.style.width = pct + "%"; bar.appendChild(fill);
  bar.dataset.percent = pct.toFixed(1); bar.dataset.rows = dump.rows;
  const td = row.insertCell(); td.appendChild(bar);
  td.append(" " + (dump.percent == null ? "?" : pct.toFixed(1) + "%"));
  cell(row, dump.rows + (dump.estimated_total ? " / ~" + dump.estimated_total : ""));
  cell(row, dump.current_table || ""); cell(row, seconds(dump.eta_s));
  const actions = row.insertCell();
  if (dump.state === "running" || dump.state === "queued") {
    button(actions, dump, "pause"); button(actions, dump, "cancel");
  } else if (dump.state === "paused") {
    button(actions, dump, "resume"); button(actions, dump, "cancel");
  }
}
function show(status) {
  const set = (id, v) => { document.getElementById(id).textContent = v == null ? "-" : v; };
  set("instance", status.instance || ""); set("role", status.role);
  set("leader", status.leader ? status.leader.instance : status.role);
  set("epoch", status.epoch); set("running", status.running ? "yes" : "no");
  set("lag", seconds(status.lag_s)); set("position", status.committed_position);
  const tables = document.querySelector("#tables tbody"); tables.replaceChildren();
  for (const [name, state] of Object.entries(status.tables)) {
    const row = tables.insertRow(); row.dataset.table = name;
    cell(row, name); cell(row, state, "state-" + state);
  }
  const dumps = document.querySelector("#dumps tbody"); dumps.replaceChildren();
  for (const dump of status.dumps.slice().reverse()) { dumpRow(dumps, dump); }
}
async function refresh() {
  try { show(await call("GET", "/api/v1/status"));
        document.getElementById("error").textContent = ""; }
  catch (e) { document.getElementById("error").textContent = e.message; }
}
refresh(); setInterval(refresh, 1000);
</script></body></html>
"""
