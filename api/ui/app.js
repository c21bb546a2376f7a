// The daemon's dashboard: a live table of sandboxes, kept current by
// /v1/events, with actions and a logs drawer. It uses only the public /v1
// API, with the session cookie the one-time link set. Text from the daemon
// is only ever set as textContent: nothing a sandbox says becomes markup.
'use strict';

const $ = (id) => document.getElementById(id);
const STATES = ['starting', 'started', 'stopped'];
const LIVE = new Set(['starting', 'started']);
const LOG_KEEP = 1 << 20; // characters kept in the logs drawer

const rows = new Map(); // id → {sb, tr, cells, last}
let info = null;
let events = null;
let drawer = null; // {id, es}

// ---- the API ----

async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 401) {
    signedOut();
    throw new Error('signed out');
  }
  if (!res.ok) {
    let msg = res.status + ' ' + res.statusText;
    try {
      const e = await res.json();
      msg = e.error.code + ': ' + e.error.message;
    } catch (_) { /* not the API's error body */ }
    throw new Error(msg);
  }
  return res.status === 204 ? null : res.json();
}

// signedOut reloads: without a session the daemon's page says how to get
// one, and shows no data.
function signedOut() {
  if (!signedOut.done) {
    signedOut.done = true;
    location.reload();
  }
}

function notice(msg) {
  $('notice').textContent = msg || '';
  clearTimeout(notice.t);
  if (msg) notice.t = setTimeout(() => { $('notice').textContent = ''; }, 8000);
}

// ---- time ----

function ago(t, now) {
  if (!t) return '—';
  return span(now - Date.parse(t));
}

function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm';
  const h = Math.floor(m / 60);
  if (h < 48) return h + 'h' + (m % 60 ? ' ' + (m % 60) + 'm' : '');
  return Math.floor(h / 24) + 'd';
}

function autostop(sb, now) {
  if (!sb.autoStopInterval) return 'off';
  if (!LIVE.has(sb.state) || !sb.autoStopAt) return '—';
  const left = Date.parse(sb.autoStopAt) - now;
  return left <= 0 ? 'next check' : 'in ' + span(left);
}

function usage(sb) {
  const u = sb.usage;
  if (!u || !LIVE.has(sb.state)) return '';
  const mib = u.memoryBytes / (1 << 20);
  return u.cpuSeconds.toFixed(1) + ' s · ' + (mib < 10 ? mib.toFixed(1) : Math.round(mib)) + ' MiB';
}

// ---- rows ----

function makeRow(sb) {
  const tr = document.createElement('tr');
  tr.dataset.id = sb.id;
  const td = () => tr.appendChild(document.createElement('td'));
  const cells = {};
  cells.state = td().appendChild(document.createElement('span'));
  cells.origin = td().appendChild(document.createElement('span'));
  cells.origin.className = 'badge';
  const name = td().appendChild(document.createElement('button'));
  name.type = 'button';
  name.className = 'link name';
  name.title = 'Show its logs';
  name.addEventListener('click', () => openLogs(sb.id, name));
  cells.name = name;
  cells.snapshot = td();
  cells.runtime = td();
  cells.port = td();
  cells.age = td();
  cells.activity = td();
  cells.autostop = td();
  cells.usage = td();
  cells.reason = td();
  const actions = td();
  actions.className = 'actions';
  const button = (label, cls, fn) => {
    const b = actions.appendChild(document.createElement('button'));
    b.type = 'button';
    b.textContent = label;
    b.className = cls;
    b.addEventListener('click', () => fn(b));
    return b;
  };
  cells.stop = button('Stop', 'act-stop', (b) => act(b, 'POST', '/stop', sb.id));
  cells.keep = button('Keep alive', 'act-keep', (b) => act(b, 'POST', '/refresh-activity', sb.id));
  cells.del = button('Delete', 'act-delete danger', (b) => confirmDelete(b, sb.id));
  return { sb, tr, cells, last: {} };
}

// set changes a cell's text only when it differs: no layout work for
// what did not change.
function set(r, key, text) {
  if (r.last[key] !== text) {
    r.last[key] = text;
    r.cells[key].textContent = text;
  }
}

function render(r, now) {
  const sb = r.sb;
  const live = LIVE.has(sb.state);
  if (r.last.stateClass !== sb.state) {
    r.last.stateClass = sb.state;
    r.cells.state.className = 'state state-' + sb.state;
    r.cells.stop.disabled = !live;
    r.cells.keep.disabled = !live;
  }
  set(r, 'state', sb.state);
  const origin = (sb.labels && sb.labels.origin) || '';
  set(r, 'origin', origin);
  r.cells.origin.hidden = !origin;
  set(r, 'name', sb.id);
  set(r, 'snapshot', sb.snapshot || '—');
  set(r, 'runtime', sb.runtime);
  const port = live ? sb.previewUrl + '#' + sb.port : String(sb.port);
  if (r.last.port !== port) {
    r.last.port = port;
    r.cells.port.textContent = '';
    if (live) {
      const a = r.cells.port.appendChild(document.createElement('a'));
      a.href = sb.previewUrl;
      a.target = '_blank';
      a.rel = 'noopener noreferrer';
      a.textContent = sb.port;
      a.title = 'Open its preview: ' + sb.previewUrl;
    } else {
      r.cells.port.textContent = sb.port;
    }
  }
  set(r, 'age', ago(sb.createdAt, now));
  set(r, 'activity', ago(sb.lastActivityAt, now));
  set(r, 'autostop', autostop(sb, now));
  set(r, 'usage', usage(sb));
  const reason = sb.errorReason || '';
  set(r, 'reason', reason);
  r.cells.reason.title = reason;
  r.cells.reason.className = reason && reason !== 'auto_stopped' ? 'reason-bad' : '';
  r.tr.hidden = !matches(sb);
}

// upsert adds or updates one sandbox, keeping rows oldest first.
function upsert(sb) {
  let r = rows.get(sb.id);
  if (r) {
    if (r.sb.usage && !sb.usage && LIVE.has(sb.state)) sb.usage = r.sb.usage; // events carry none
    r.sb = sb;
  } else {
    r = makeRow(sb);
    rows.set(sb.id, r);
    // Creates arrive in order: almost always after the last row.
    const body = $('rows');
    let before = null;
    const last = body.lastElementChild && rows.get(body.lastElementChild.dataset.id);
    if (last && last.sb.createdAt > sb.createdAt) {
      for (const tr of body.children) {
        if (rows.get(tr.dataset.id).sb.createdAt > sb.createdAt) {
          before = tr;
          break;
        }
      }
    }
    body.insertBefore(r.tr, before);
  }
  render(r, Date.now());
}

function remove(id) {
  const r = rows.get(id);
  if (r) {
    r.tr.remove();
    rows.delete(id);
  }
}

// replaceAll makes the table the daemon's list: rows it does not name go,
// the rest are updated and put in its order.
function replaceAll(list) {
  const keep = new Set(list.map((sb) => sb.id));
  for (const id of [...rows.keys()]) if (!keep.has(id)) remove(id);
  const frag = document.createDocumentFragment();
  for (const sb of list) {
    upsert(sb);
    frag.appendChild(rows.get(sb.id).tr);
  }
  $('rows').appendChild(frag);
  summarize();
}

// scheduleSummary recounts once per frame, however many events came.
function scheduleSummary() {
  if (!scheduleSummary.pending) {
    scheduleSummary.pending = true;
    requestAnimationFrame(() => {
      scheduleSummary.pending = false;
      summarize();
    });
  }
}

function summarize() {
  const counts = { starting: 0, started: 0, stopped: 0 };
  let shown = 0;
  for (const r of rows.values()) {
    counts[r.sb.state] = (counts[r.sb.state] || 0) + 1;
    if (!r.tr.hidden) shown++;
  }
  const ul = $('counts');
  if (ul.children.length === 0) {
    for (const s of STATES) {
      const li = ul.appendChild(document.createElement('li'));
      li.className = 'state state-' + s;
      li.dataset.state = s;
    }
  }
  for (const li of ul.children) li.textContent = counts[li.dataset.state] + ' ' + li.dataset.state;
  $('shown').textContent = rows.size ? shown + ' of ' + rows.size + ' shown' : '';
  const empty = $('empty');
  empty.hidden = shown > 0;
  empty.textContent = rows.size ? 'No sandbox matches the filter.' : 'No sandboxes yet. Create one: agent-control-plane create NAME';
  if (drawer) {
    const r = rows.get(drawer.id);
    $('drawer-state').textContent = r ? r.sb.state : 'deleted';
  }
}

// ---- filter ----

let filter = { state: '', labels: [] };

function readFilter() {
  const labels = [];
  for (const part of $('f-label').value.split(',')) {
    const p = part.trim();
    if (!p) continue;
    const i = p.indexOf('=');
    labels.push(i < 0 ? [p, null] : [p.slice(0, i).trim(), p.slice(i + 1).trim()]);
  }
  filter = { state: $('f-state').value, labels };
  const now = Date.now();
  for (const r of rows.values()) render(r, now);
  summarize();
}

function matches(sb) {
  if (filter.state === 'live' ? !LIVE.has(sb.state) : filter.state && sb.state !== filter.state) return false;
  for (const [k, v] of filter.labels) {
    const have = sb.labels ? sb.labels[k] : undefined;
    if (have === undefined || (v !== null && have !== v)) return false;
  }
  return true;
}

// ---- actions ----

async function act(button, method, suffix, id) {
  button.disabled = true;
  try {
    await api(method, '/v1/sandboxes/' + encodeURIComponent(id) + suffix);
    if (suffix === '/refresh-activity') {
      // No event says so: read the sandbox back for its new activity.
      upsert(await api('GET', '/v1/sandboxes/' + encodeURIComponent(id)));
    }
  } catch (e) {
    notice(id + ': ' + e.message);
  } finally {
    const r = rows.get(id);
    if (r) {
      r.last.stateClass = null;
      render(r, Date.now());
    }
  }
}

function confirmDelete(button, id) {
  const dlg = $('confirm');
  $('confirm-text').textContent = 'Delete sandbox ' + id + '? Its process is stopped and its directory removed.';
  dlg.returnValue = '';
  dlg.onclose = () => {
    if (dlg.returnValue === 'ok') act(button, 'DELETE', '', id);
    else button.focus();
  };
  dlg.showModal();
}

// ---- the logs drawer ----

function openLogs(id, from) {
  closeLogs();
  const pre = $('log');
  pre.textContent = '';
  $('drawer-title').textContent = 'Logs of ' + id;
  $('drawer').hidden = false;
  const es = new EventSource('/v1/sandboxes/' + encodeURIComponent(id) + '/entrypoint-logs?follow=true');
  drawer = { id, es, from };
  let kept = 0; // characters in the drawer
  summarize();
  const append = (text, cls) => {
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    const s = document.createElement('span');
    if (cls) s.className = cls;
    s.textContent = text;
    pre.appendChild(s);
    // Counted as they come: reading pre.textContent would copy the whole
    // log at every line.
    kept += text.length;
    while (kept > LOG_KEEP && pre.firstChild) {
      kept -= pre.firstChild.textContent.length;
      pre.firstChild.remove();
    }
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  };
  es.addEventListener('stdout', (e) => append(JSON.parse(e.data).text));
  es.addEventListener('stderr', (e) => append(JSON.parse(e.data).text, 'stderr'));
  es.addEventListener('end', (e) => {
    const sb = JSON.parse(e.data);
    append('\n— ' + sb.state + (sb.errorReason ? ': ' + sb.errorReason : '') + ' —\n', 'meta');
    es.close();
  });
  es.onerror = () => {
    if (drawer && drawer.es === es) append('\n— the stream ended; reopen the logs to follow again —\n', 'meta');
    es.close();
  };
  $('drawer-close').focus();
}

function closeLogs() {
  if (!drawer) return;
  drawer.es.close();
  const from = drawer.from;
  drawer = null;
  $('drawer').hidden = true;
  if (from && from.isConnected) from.focus();
}

// ---- the daemon ----

async function refreshInfo() {
  try {
    const res = await fetch('/v1/info', { credentials: 'same-origin' });
    info = await res.json();
  } catch (_) {
    return;
  }
  showInfo();
}

function showInfo() {
  if (!info) return;
  const down = info.unavailable || {};
  const runtimes = info.runtimes.map((r) => (down[r] ? r + ' (unavailable)' : r)).join(', ');
  const text = 'v' + info.version + ' · pid ' + info.pid + ' · up ' + span(Date.now() - Date.parse(info.startedAt)) + ' · runtimes: ' + runtimes;
  $('daemon').textContent = text;
  $('daemon').title = Object.entries(down).map(([k, v]) => k + ': ' + v).join('\n');
}

function setConn(live) {
  const c = $('conn');
  c.className = 'conn ' + (live ? 'live' : 'down');
  c.textContent = live ? 'live' : 'reconnecting…';
}

// connect follows /v1/events. EventSource reconnects by itself with the
// last event id: the daemon replays what was missed, or sends a fresh
// list (after its own restart too). A stream it refuses (a rotated token)
// is retried after checking the session.
function connect() {
  const es = new EventSource('/v1/events');
  events = es;
  es.addEventListener('sandboxes_replaced', (e) => {
    replaceAll(JSON.parse(e.data).sandboxes);
    setConn(true);
    refreshInfo();
  });
  for (const t of ['sandbox.created', 'sandbox.started', 'sandbox.stopped']) {
    es.addEventListener(t, (e) => {
      upsert(JSON.parse(e.data).sandbox);
      scheduleSummary();
    });
  }
  es.addEventListener('sandbox.deleted', (e) => {
    remove(JSON.parse(e.data).sandbox.id);
    scheduleSummary();
  });
  es.onopen = () => setConn(true);
  es.onerror = () => {
    setConn(false);
    if (es.readyState === EventSource.CLOSED) {
      setTimeout(async () => {
        try {
          await api('GET', '/v1/sandboxes?limit=1');
        } catch (_) { /* signed out reloads; a daemon away is tried again */ }
        if (events === es) connect();
      }, 2000);
    }
  };
}

// pollUsage reads what live sandboxes consume (events carry no usage),
// and their activity, which keep-alives from other clients move.
async function pollUsage() {
  if (document.hidden || ![...rows.values()].some((r) => LIVE.has(r.sb.state))) return;
  try {
    const list = await api('GET', '/v1/sandboxes?usage=true&states=starting,started');
    for (const sb of list.sandboxes) if (rows.has(sb.id)) upsert(sb);
  } catch (_) { /* the next poll tries again */ }
}

function tick() {
  const now = Date.now();
  for (const r of rows.values()) {
    set(r, 'age', ago(r.sb.createdAt, now));
    set(r, 'activity', ago(r.sb.lastActivityAt, now));
    set(r, 'autostop', autostop(r.sb, now));
  }
  showInfo();
}

async function main() {
  $('f-state').addEventListener('change', readFilter);
  $('f-label').addEventListener('input', readFilter);
  $('drawer-close').addEventListener('click', closeLogs);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && drawer && !$('confirm').open) closeLogs();
  });
  await refreshInfo();
  try {
    replaceAll((await api('GET', '/v1/sandboxes?usage=true')).sandboxes);
  } catch (e) {
    notice(e.message);
  }
  connect();
  setInterval(tick, 1000);
  setInterval(pollUsage, 5000);
}

main();
