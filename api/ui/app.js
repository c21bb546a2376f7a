// The daemon's dashboard: a live table of sandboxes, kept current by
// /v1/events, with actions and a logs drawer. It uses only the public /v1
// API, with a session secret it got for the one-time code in its URL's
// fragment and keeps in this origin's storage (no other port's page can
// read it), sent as a bearer credential on every call and stream. No
// cookie is used: the browser would send one to every port of localhost.
// Text from the daemon is only ever set as textContent: nothing a sandbox
// says becomes markup.
'use strict';

const $ = (id) => document.getElementById(id);
const STATES = ['starting', 'started', 'stopped'];
const LIVE = new Set(['starting', 'started']);
const LOG_KEEP = 1 << 20; // characters kept in the logs drawer

const rows = new Map(); // id → {sb, tr, cells, last}
let info = null;
let events = null;
let drawer = null; // {id, es}

// ---- the session ----

const SESSION_KEY = 'agent-control-plane.session';

function secret() {
  try {
    return localStorage.getItem(SESSION_KEY) || '';
  } catch (_) {
    return '';
  }
}

// signIn trades the one-time code in the fragment (#code=…) for a session
// secret, and takes the code out of the address bar and the history
// first, whatever the answer.
async function signIn() {
  const m = /^#code=([A-Za-z0-9_-]{16,128})$/.exec(location.hash);
  if (!m) return;
  history.replaceState(null, '', location.pathname);
  const res = await fetch('/v1/dashboard/sessions', {
    method: 'POST', credentials: 'omit', cache: 'no-store',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ code: m[1] }),
  });
  if (!res.ok) {
    let msg = 'This link did not sign you in.';
    try {
      msg = (await res.json()).error.message;
    } catch (_) { /* not the API's error body */ }
    $('signin-error').textContent = msg;
    return;
  }
  localStorage.setItem(SESSION_KEY, (await res.json()).secret);
}

function authHeaders(h) {
  h = h || {};
  h.Authorization = 'Bearer ' + secret();
  return h;
}

// signedOut forgets the session and shows how to get a new one: no data
// stays on the page.
function signedOut() {
  try {
    localStorage.removeItem(SESSION_KEY);
  } catch (_) { /* storage refused */ }
  if (events) events.abort();
  events = null;
  closeLogs();
  replaceAll([]);
  $('app').hidden = true;
  $('signin').hidden = false;
}

// ---- the API ----

async function api(method, path, body) {
  const init = { method, credentials: 'omit', headers: authHeaders() };
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

// stream reads a Server-Sent Events stream with the session's credential
// (EventSource cannot send one): on.event(type, data, id) per event,
// on.open() once the daemon answered. It resolves when the stream ends
// and rejects on a refusal or a network error; abort() on the returned
// controller ends it.
function stream(path, lastId, on) {
  const ctl = new AbortController();
  ctl.done = (async () => {
    const headers = authHeaders({ Accept: 'text/event-stream' });
    if (lastId) headers['Last-Event-ID'] = lastId;
    const res = await fetch(path, { headers, credentials: 'omit', cache: 'no-store', signal: ctl.signal });
    if (res.status === 401) {
      signedOut();
      throw new Error('signed out');
    }
    if (!res.ok || !res.body) throw new Error(res.status + ' ' + res.statusText);
    if (on.open) on.open();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let type = '';
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data.length) on.event(type || 'message', data.join('\n'), lastId);
          type = '';
          data = [];
          continue;
        }
        if (line[0] === ':') continue; // a comment (keep-alive)
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        let v = i < 0 ? '' : line.slice(i + 1);
        if (v[0] === ' ') v = v.slice(1);
        if (field === 'event') type = v;
        else if (field === 'data') data.push(v);
        else if (field === 'id') lastId = v;
      }
    }
  })();
  return ctl;
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
  // A stopped sandbox starts again in place, its files kept.
  cells.start = button('Start', 'act-start', (b) => act(b, 'POST', '/start', sb.id));
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
    r.cells.stop.hidden = !live;
    r.cells.start.disabled = sb.state !== 'stopped';
    r.cells.start.hidden = sb.state !== 'stopped';
    r.cells.keep.disabled = !live;
  }
  set(r, 'state', sb.state);
  const origin = (sb.labels && sb.labels.origin) || '';
  set(r, 'origin', origin);
  r.cells.origin.hidden = !origin;
  set(r, 'name', sb.id);
  set(r, 'snapshot', sb.snapshot || '—');
  set(r, 'runtime', sb.runtime);
  // A stopped sandbox's port is no longer its own (a start leases one
  // again): none is shown, as in the CLI.
  const port = live ? sb.previewUrl + '#' + sb.port : '—';
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
      r.cells.port.textContent = '—';
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

let filter = { state: '', name: '', labels: [] };

function readFilter() {
  const labels = [];
  for (const part of $('f-label').value.split(',')) {
    const p = part.trim();
    if (!p) continue;
    const i = p.indexOf('=');
    labels.push(i < 0 ? [p, null] : [p.slice(0, i).trim(), p.slice(i + 1).trim()]);
  }
  filter = { state: $('f-state').value, name: $('f-name').value.trim().toLowerCase(), labels };
  const now = Date.now();
  for (const r of rows.values()) render(r, now);
  summarize();
}

function matches(sb) {
  if (filter.state === 'live' ? !LIVE.has(sb.state) : filter.state && sb.state !== filter.state) return false;
  if (filter.name && !sb.id.toLowerCase().includes(filter.name)) return false;
  for (const [k, v] of filter.labels) {
    const have = sb.labels ? sb.labels[k] : undefined;
    if (have === undefined || (v !== null && have !== v)) return false;
  }
  return true;
}

// ---- create ----

// loadSnapshots fills the create form's snapshot choice from the daemon.
async function loadSnapshots() {
  const sel = $('c-snapshot');
  const { items } = await api('GET', '/v1/snapshots');
  sel.textContent = '';
  for (const s of items) {
    const o = sel.appendChild(document.createElement('option'));
    o.value = s.name;
    o.textContent = s.name + ' (' + s.runtime + ')';
    o.selected = !!s.default;
  }
}

// create posts the form; the new sandbox's row comes from the feed.
async function create(ev) {
  ev.preventDefault();
  const body = { name: $('c-name').value.trim(), snapshot: $('c-snapshot').value || undefined, labels: {} };
  for (const part of $('c-labels').value.split(',')) {
    const p = part.trim();
    if (!p) continue;
    const i = p.indexOf('=');
    if (i <= 0) {
      notice('labels: want key=value, got ' + p);
      return;
    }
    body.labels[p.slice(0, i).trim()] = p.slice(i + 1).trim();
  }
  if (!('origin' in body.labels)) body.labels.origin = 'dashboard';
  for (const [id, key] of [['c-cpu', 'cpu'], ['c-memory', 'memory']]) {
    const v = $(id).value;
    if (v !== '') body[key] = Number(v);
  }
  const button = $('c-submit');
  button.disabled = true;
  try {
    upsert(await api('POST', '/v1/sandboxes', body));
    $('c-name').value = '';
    $('c-labels').value = '';
  } catch (e) {
    notice(body.name + ': ' + e.message);
  } finally {
    button.disabled = false;
  }
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
  const handlers = {
    stdout: (d) => append(JSON.parse(d).text),
    stderr: (d) => append(JSON.parse(d).text, 'stderr'),
    end: (d) => {
      const sb = JSON.parse(d);
      append('\n— ' + sb.state + (sb.errorReason ? ': ' + sb.errorReason : '') + ' —\n', 'meta');
      ended = true;
    },
  };
  let ended = false;
  const es = stream('/v1/sandboxes/' + encodeURIComponent(id) + '/entrypoint-logs?follow=true', '', {
    event: (type, d) => handlers[type] && handlers[type](d),
  });
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
  const gone = () => {
    if (!ended && drawer && drawer.es === es) append('\n— the stream ended; reopen the logs to follow again —\n', 'meta');
  };
  es.done.then(gone, gone);
  $('drawer-close').focus();
}

function closeLogs() {
  if (!drawer) return;
  drawer.es.abort();
  const from = drawer.from;
  drawer = null;
  $('drawer').hidden = true;
  if (from && from.isConnected) from.focus();
}

// ---- the daemon ----

async function refreshInfo() {
  try {
    const res = await fetch('/v1/info', { credentials: 'omit', cache: 'no-store' });
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

// connect follows /v1/events and reconnects by itself with the last
// event id: the daemon replays what was missed, or sends a fresh list
// (after its own restart too). A stream it refuses with 401 signs the
// page out.
let lastEventId = '';

function connect() {
  const types = {
    sandboxes_replaced: (ev) => {
      replaceAll(ev.sandboxes);
      setConn(true);
      refreshInfo();
    },
    'sandbox.deleted': (ev) => {
      remove(ev.sandbox.id);
      scheduleSummary();
    },
  };
  for (const t of ['sandbox.created', 'sandbox.starting', 'sandbox.started', 'sandbox.stopped']) {
    types[t] = (ev) => {
      upsert(ev.sandbox);
      scheduleSummary();
    };
  }
  const es = stream('/v1/events', lastEventId, {
    open: () => setConn(true),
    event: (type, data, id) => {
      lastEventId = id || lastEventId;
      if (types[type]) types[type](JSON.parse(data));
    },
  });
  events = es;
  const again = () => {
    if (events !== es) return; // signed out, or replaced
    setConn(false);
    setTimeout(() => {
      if (events === es) connect();
    }, 1000);
  };
  es.done.then(again, again);
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
  $('f-name').addEventListener('input', readFilter);
  $('drawer-close').addEventListener('click', closeLogs);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && drawer && !$('confirm').open) closeLogs();
  });
  try {
    await signIn();
  } catch (e) {
    $('signin-error').textContent = 'Signing in failed: ' + e.message;
  }
  if (!secret()) return; // the page says how to sign in
  await refreshInfo();
  $('create').addEventListener('submit', create);
  loadSnapshots().catch((e) => notice('snapshots: ' + e.message));
  try {
    replaceAll((await api('GET', '/v1/sandboxes?usage=true')).sandboxes);
  } catch (e) {
    if (!secret()) return;
    notice(e.message);
  }
  $('signin').hidden = true;
  $('app').hidden = false;
  connect();
  setInterval(tick, 1000);
  setInterval(pollUsage, 5000);
}

main();
