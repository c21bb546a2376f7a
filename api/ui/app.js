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

const rows = new Map(); // id → {sb, tr, cells, last, cpu, rate}
const selected = new Set(); // ids of the rows ticked, all of them shown
let info = null;
let events = null;
let drawer = null; // {id, es, from, dd, extra, poll}

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
  closeDrawer();
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

function bytes(n) {
  const mib = n / (1 << 20);
  if (mib >= 1024) return (mib / 1024).toFixed(mib >= 10240 ? 0 : 1) + ' GiB';
  return (mib < 10 ? mib.toFixed(1) : Math.round(mib)) + ' MiB';
}

const cpus = (n) => n + (n === 1 ? ' CPU' : ' CPUs');

// percent of one CPU: 0.25 CPUs is 25%.
function percent(cpus) {
  const p = cpus * 100;
  return (p < 10 ? p.toFixed(1) : Math.round(p)) + '%';
}

// sample keeps the CPU time a poll read, and the rate since the one
// before: usage carries a counter, people read a rate.
function sample(r, u) {
  const now = performance.now();
  const p = r.cpu;
  r.cpu = { t: now, s: u.cpuSeconds };
  if (!p || u.cpuSeconds < p.s) {
    r.rate = undefined; // a first reading, or a new workload (a restart)
  } else if (now - p.t >= 500) {
    r.rate = (u.cpuSeconds - p.s) / ((now - p.t) / 1000);
  } else {
    r.cpu = p; // too close to the last to say anything
  }
}

// usage is the row's usage cell: CPU as a rate once two polls tell it
// (CPU time until then), and memory.
function usage(r) {
  const u = r.sb.usage;
  if (!u || !LIVE.has(r.sb.state)) return '';
  const cpu = r.rate === undefined ? u.cpuSeconds.toFixed(1) + ' s' : percent(r.rate) + ' CPU';
  return cpu + ' · ' + bytes(u.memoryBytes);
}

// ---- rows ----

function makeRow(sb) {
  const tr = document.createElement('tr');
  tr.dataset.id = sb.id;
  const td = (key) => {
    const c = tr.appendChild(document.createElement('td'));
    c.className = 'col-' + key;
    return c;
  };
  const cells = {};
  const box = td('sel').appendChild(document.createElement('input'));
  box.type = 'checkbox';
  box.className = 'sel';
  box.setAttribute('aria-label', 'Select ' + sb.id);
  box.addEventListener('change', () => select(sb.id, box.checked));
  cells.sel = box;
  cells.state = td('state').appendChild(document.createElement('span'));
  cells.origin = td('origin').appendChild(document.createElement('span'));
  cells.origin.className = 'badge';
  const name = td('name').appendChild(document.createElement('button'));
  name.type = 'button';
  name.className = 'link name clamp'; // two lines at most; the whole name on hover
  name.title = sb.id + ': show its details and logs';
  name.addEventListener('click', () => openDrawer(sb.id, name));
  cells.name = name;
  for (const key of ['snapshot', 'runtime', 'port', 'age', 'activity', 'autostop', 'usage']) cells[key] = td(key);
  cells.reason = td('reason').appendChild(document.createElement('span'));
  const actions = td('actions');
  actions.classList.add('actions');
  const button = (label, cls, fn) => {
    const b = actions.appendChild(document.createElement('button'));
    b.type = 'button';
    b.textContent = label;
    b.className = cls;
    b.addEventListener('click', () => fn(b));
    return b;
  };
  cells.stop = button('Stop', 'act-stop', (b) => act(b, sb.id, () => stop(sb.id)));
  // A stopped sandbox starts again in place, its files kept; a restart is
  // a stop and a start.
  cells.start = button('Start', 'act-start', (b) => act(b, sb.id, () => start(sb.id)));
  cells.restart = button('Restart', 'act-restart', (b) => act(b, sb.id, async () => {
    await stop(sb.id);
    await start(sb.id);
  }));
  cells.keep = button('Keep alive', 'act-keep', (b) => act(b, sb.id, async () => {
    await api('POST', sbPath(sb.id) + '/refresh-activity');
    // No event says so: read the sandbox back for its new activity.
    upsert(await api('GET', sbPath(sb.id)));
  }));
  cells.del = button('Delete', 'act-delete danger', (b) => confirmThen(
    'Delete sandbox ' + sb.id + '? Its process is stopped and its directory removed.', b,
    () => act(b, sb.id, () => del(sb.id))));
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
    r.cells.restart.disabled = !live;
    r.cells.restart.hidden = !live;
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
  set(r, 'usage', usage(r));
  // A reason shows two lines at most; the whole of it on hover and in
  // the drawer.
  const reason = sb.errorReason || '';
  set(r, 'reason', reason);
  r.cells.reason.title = reason;
  r.cells.reason.className = 'clamp' + (reason && reason !== 'auto_stopped' ? ' reason-bad' : '');
  r.tr.hidden = !matches(sb);
  if (r.tr.hidden && selected.has(sb.id)) select(sb.id, false); // acts only on what is shown
  if (drawer && drawer.id === sb.id) renderDetails(now);
}

// upsert adds or updates one sandbox, keeping rows oldest first.
function upsert(sb) {
  let r = rows.get(sb.id);
  if (r) {
    if (r.sb.usage && !sb.usage && LIVE.has(sb.state)) sb.usage = r.sb.usage; // events carry none
    else if (sb.usage) sample(r, sb.usage);
    r.sb = sb;
  } else {
    r = makeRow(sb);
    if (sb.usage) sample(r, sb.usage);
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
    selected.delete(id);
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
  let stoppedShown = 0;
  let liveSelected = 0;
  for (const r of rows.values()) {
    counts[r.sb.state] = (counts[r.sb.state] || 0) + 1;
    if (!r.tr.hidden) {
      shown++;
      if (r.sb.state === 'stopped') stoppedShown++;
    }
    if (selected.has(r.sb.id) && LIVE.has(r.sb.state)) liveSelected++;
  }
  const n = selected.size;
  $('sel-count').textContent = n ? n + (n === 1 ? ' sandbox' : ' sandboxes') + ' selected' : 'Select rows to act on several at once.';
  $('bulk-stop').disabled = liveSelected === 0;
  $('bulk-delete').disabled = n === 0;
  $('prune').disabled = stoppedShown === 0;
  $('prune').textContent = 'Prune stopped' + (stoppedShown ? ' (' + stoppedShown + ')' : '');
  const all = $('sel-all');
  all.checked = shown > 0 && n === shown;
  all.indeterminate = n > 0 && n < shown;
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

const sbPath = (id) => '/v1/sandboxes/' + encodeURIComponent(id);
const stop = (id) => api('POST', sbPath(id) + '/stop');
const start = (id) => api('POST', sbPath(id) + '/start');
const del = (id) => api('DELETE', sbPath(id));

// act runs one action of a row's, its button disabled meanwhile; the row's
// new state comes from the feed.
async function act(button, id, fn) {
  button.disabled = true;
  try {
    await fn();
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

function confirmThen(text, from, fn) {
  const dlg = $('confirm');
  $('confirm-text').textContent = text;
  dlg.returnValue = '';
  dlg.onclose = () => {
    if (dlg.returnValue === 'ok') fn();
    else if (from) from.focus();
  };
  dlg.showModal();
}

// ---- several at once ----

function select(id, on) {
  const r = rows.get(id);
  if (on && r) selected.add(id);
  else selected.delete(id);
  if (r) r.cells.sel.checked = on;
  scheduleSummary();
}

function selectAll(on) {
  for (const r of rows.values()) select(r.sb.id, on && !r.tr.hidden);
}

// each runs fn for every id, a few at a time (a browser opens six
// connections to a host anyway), and says which failed.
async function each(ids, fn) {
  const failed = [];
  const queue = [...ids];
  const worker = async () => {
    for (let id; (id = queue.shift()) !== undefined;) {
      try {
        await fn(id);
      } catch (e) {
        failed.push(id + ': ' + e.message);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(4, queue.length) }, worker));
  if (failed.length) notice(failed.join('; '));
}

function names(ids) {
  return ids.length <= 5 ? ids.join(', ') : ids.slice(0, 5).join(', ') + ' and ' + (ids.length - 5) + ' more';
}

function bulkStop() {
  each([...selected].filter((id) => LIVE.has(rows.get(id)?.sb.state)), stop);
}

function bulkDelete() {
  const ids = [...selected];
  if (!ids.length) return;
  confirmThen('Delete ' + ids.length + (ids.length === 1 ? ' sandbox' : ' sandboxes') + ' (' + names(ids) + ')? Their processes are stopped and their directories removed.',
    $('bulk-delete'), () => each(ids, del));
}

function prune() {
  const ids = [...rows.values()].filter((r) => !r.tr.hidden && r.sb.state === 'stopped').map((r) => r.sb.id);
  if (!ids.length) return;
  confirmThen('Delete the ' + (ids.length === 1 ? 'stopped sandbox' : ids.length + ' stopped sandboxes') + ' shown (' + names(ids) + ')? Their directories are removed.',
    $('prune'), () => each(ids, del));
}

// ---- the drawer: a sandbox's details and logs ----

// openDrawer shows one sandbox: its details, kept current by the feed and
// by a read every two seconds (its workspace, its variables' names, its
// usage), and its entrypoint logs, followed.
function openDrawer(id, from) {
  closeDrawer();
  const pre = $('log');
  pre.textContent = '';
  $('details-list').textContent = '';
  $('drawer-title').textContent = id;
  $('drawer').hidden = false;
  const line = (stream) => (d) => {
    const c = JSON.parse(d);
    append(c.text, stream, c.time);
  };
  const handlers = {
    stdout: line('stdout'),
    stderr: line('stderr'),
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
  drawer = { id, es, from, dd: {}, extra: null };
  const read = async () => {
    try {
      const sb = await api('GET', sbPath(id));
      if (drawer && drawer.id === id) drawer.extra = { workspace: sb.workspace, envKeys: sb.envKeys || [] };
      if (rows.has(id)) upsert(sb);
    } catch (_) { /* deleted, or the daemon is away: the feed says */ }
  };
  read();
  drawer.poll = setInterval(() => {
    if (!document.hidden && LIVE.has(rows.get(id)?.sb.state)) read();
  }, 2000);
  renderDetails(Date.now());
  let kept = 0; // characters in the drawer
  summarize();
  // Each line is a span: its time (shown with "timestamps"), its text;
  // stderr's are marked. The search hides the lines it does not match.
  const append = (text, cls, time) => {
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    const s = document.createElement('span');
    s.className = 'line' + (cls ? ' ' + cls : '');
    if (time) {
      const ts = document.createElement('span');
      ts.className = 'ts';
      ts.textContent = time + ' ';
      s.appendChild(ts);
      s.title = (cls === 'stderr' ? 'stderr, ' : 'stdout, ') + 'written ' + new Date(time).toLocaleString();
    }
    s.appendChild(document.createTextNode(text));
    s.hidden = !lineMatches(s);
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

// logQuery is the drawer's search, lower-cased once per change rather
// than read from the page at every line.
let logQuery = '';

// lineMatches says whether a line of the drawer passes the search.
function lineMatches(s) {
  return !logQuery || s.classList.contains('meta') || s.lastChild.textContent.toLowerCase().includes(logQuery);
}

function searchLogs() {
  logQuery = $('log-search').value.toLowerCase();
  for (const s of $('log').children) s.hidden = !lineMatches(s);
}

// downloadLogs saves what the drawer holds, each line after its time and
// stream.
function downloadLogs() {
  if (!drawer) return;
  const out = [];
  for (const s of $('log').children) {
    if (s.classList.contains('meta')) continue;
    const ts = s.querySelector('.ts');
    out.push((ts ? ts.textContent : '') + (s.classList.contains('stderr') ? 'stderr ' : 'stdout ') + s.lastChild.textContent);
  }
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([out.join('')], { type: 'text/plain' }));
  a.download = drawer.id + '-logs.txt';
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

// when is a time as this browser shows it, and how long ago.
function when(t, now) {
  if (!t) return '—';
  return new Date(t).toLocaleString() + ' (' + ago(t, now) + ' ago)';
}

// detail sets one line of the details, made the first time in the order
// of the first render.
function detail(key, label, text, title) {
  let dd = drawer.dd[key];
  if (!dd) {
    const dl = $('details-list');
    dl.appendChild(document.createElement('dt')).textContent = label;
    dd = dl.appendChild(document.createElement('dd'));
    dd.id = 'd-' + key;
    drawer.dd[key] = dd;
  }
  if (dd.firstChild?.nodeType !== Node.TEXT_NODE) dd.prepend(document.createTextNode(''));
  if (dd.firstChild.data !== text) dd.firstChild.data = text;
  dd.title = title || '';
  return dd;
}

function renderDetails(now) {
  const r = drawer && rows.get(drawer.id);
  if (!r) return;
  const sb = r.sb;
  const x = drawer.extra;
  detail('state', 'State', sb.state + (sb.errorReason ? ': ' + sb.errorReason : ''));
  detail('snapshot', 'Snapshot', (sb.snapshot || '—') + ' · ' + sb.runtime);
  detail('preview', 'Preview', LIVE.has(sb.state) && sb.previewUrl ? sb.previewUrl : '—');
  const labels = Object.entries(sb.labels || {}).map(([k, v]) => k + '=' + v).sort();
  detail('labels', 'Labels', labels.length ? labels.join(', ') : 'none');
  detail('env', 'Variables', x ? (x.envKeys.length ? x.envKeys.join(', ') : 'none') : '…', 'Their names only: values never leave the daemon.');
  detail('workspace', 'Workspace', x ? x.workspace || '—' : '…');
  detail('created', 'Created', when(sb.createdAt, now));
  detail('started', 'Started', when(sb.startedAt, now));
  detail('stopped', 'Stopped', when(sb.stoppedAt, now));
  detail('activity', 'Last activity', when(sb.lastActivityAt, now));
  detail('autostop', 'Auto-stop', sb.autoStopInterval ? 'after ' + span(sb.autoStopInterval * 60000) + ' idle · ' + autostop(sb, now) : 'off');
  const u = LIVE.has(sb.state) ? sb.usage : null;
  const none = LIVE.has(sb.state) ? 'not metered by this runtime' : '—';
  let cpu = none;
  if (u) {
    const rate = r.rate === undefined ? 'measuring…' : percent(r.rate);
    cpu = rate + (sb.cpu ? ' of ' + cpus(sb.cpu) : ' (no limit)') + ' · ' + u.cpuSeconds.toFixed(1) + ' s in all';
  } else if (sb.cpu) {
    cpu = 'limit ' + cpus(sb.cpu);
  }
  detail('cpu', 'CPU', cpu, '100% is one CPU busy');
  const limit = sb.memory ? sb.memory * (1 << 30) : 0;
  let mem = none;
  if (u) mem = bytes(u.memoryBytes) + (limit ? ' of ' + bytes(limit) + ' (' + Math.round(100 * u.memoryBytes / limit) + '%)' : ' (no limit)');
  else if (limit) mem = 'limit ' + bytes(limit);
  const dd = detail('memory', 'Memory', mem);
  let meter = dd.querySelector('meter');
  if (u && limit) {
    if (!meter) meter = dd.appendChild(document.createElement('meter'));
    meter.max = limit;
    meter.high = 0.9 * limit;
    meter.value = u.memoryBytes;
  } else if (meter) {
    meter.remove();
  }
  let tasks = none;
  if (u) tasks = u.pids + (sb.pids ? ' of ' + sb.pids : ' (no limit)');
  else if (sb.pids) tasks = 'limit ' + sb.pids;
  detail('tasks', 'Tasks', tasks);
}

function closeDrawer() {
  if (!drawer) return;
  clearInterval(drawer.poll);
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
  if (drawer) renderDetails(now);
  showInfo();
}

async function main() {
  $('f-state').addEventListener('change', readFilter);
  $('f-label').addEventListener('input', readFilter);
  $('f-name').addEventListener('input', readFilter);
  $('drawer-close').addEventListener('click', closeDrawer);
  $('sel-all').addEventListener('change', (e) => selectAll(e.target.checked));
  $('bulk-stop').addEventListener('click', bulkStop);
  $('bulk-delete').addEventListener('click', bulkDelete);
  $('prune').addEventListener('click', prune);
  $('log-search').addEventListener('input', searchLogs);
  $('log-stamps').addEventListener('change', (e) => $('log').classList.toggle('stamped', e.target.checked));
  $('log-wrap').addEventListener('change', (e) => $('log').classList.toggle('nowrap', !e.target.checked));
  $('log-download').addEventListener('click', downloadLogs);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && drawer && !$('confirm').open) closeDrawer();
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
