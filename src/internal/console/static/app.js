// Argus console: plain JavaScript, no dependencies. Every API call sends
// the bearer token (kept in sessionStorage) in a header; streams are the
// API's Server-Sent Events read with fetch, since EventSource cannot send
// headers. Data only ever reaches the page as text nodes, never as HTML.
'use strict';

const TOKEN_KEY = 'argus-api-token';
let token = sessionStorage.getItem(TOKEN_KEY) || '';
let access = null; // GET /v2/access: {auth, write}; null until known
let active = []; // what the current view must stop when it is left: streams, timers

class AuthError extends Error {}

// ---- API -------------------------------------------------------------------

function headers() {
  return token ? { Authorization: 'Bearer ' + token } : {};
}

async function api(path, init) {
  const opts = { headers: headers(), cache: 'no-store', ...(init || {}) };
  const resp = await fetch(path, opts);
  if (resp.status === 401) {
    askToken(token ? 'The token was refused.' : '');
    throw new AuthError('authentication required');
  }
  if (!resp.ok) {
    throw new Error(path.split('?')[0] + ' answered ' + resp.status + ': ' + (await resp.text()).trim());
  }
  return resp.json();
}

// loadAccess asks what the token may do; the actions need write.
async function loadAccess() {
  try {
    access = await api('/v2/access');
  } catch (err) {
    access = { auth: 'unknown', write: false };
  }
  return access;
}

// stream follows a Server-Sent Events resource, calling handlers[event]
// with each event's parsed data, and reconnects when it breaks. open is
// called on each (re)connection.
function stream(path, handlers) {
  const ctl = { closed: false, abort: null, timer: null };
  const connect = async () => {
    if (ctl.closed) return;
    const abort = new AbortController();
    ctl.abort = abort;
    try {
      const resp = await fetch(path, { headers: { ...headers(), Accept: 'text/event-stream' }, signal: abort.signal, cache: 'no-store' });
      if (resp.status === 401) {
        askToken(token ? 'The token was refused.' : '');
        return;
      }
      if (!resp.ok || !resp.body) throw new Error(path + ' answered ' + resp.status);
      setLive(true);
      if (handlers.open) handlers.open();
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          dispatch(buf.slice(0, cut), handlers);
          buf = buf.slice(cut + 2);
        }
      }
    } catch (err) {
      if (ctl.closed) return;
      if (!(err instanceof AuthError)) console.warn('stream', path, err);
    }
    if (ctl.closed) return;
    setLive(false);
    ctl.timer = setTimeout(connect, 2000); // reconnect; a snapshot brings what was missed
  };
  connect();
  const handle = { close() { ctl.closed = true; clearTimeout(ctl.timer); if (ctl.abort) ctl.abort.abort(); } };
  active.push(handle);
  return handle;
}

function dispatch(block, handlers) {
  let event = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue; // heartbeat
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length || !handlers[event]) return;
  try {
    handlers[event](JSON.parse(data.join('\n')));
  } catch (err) {
    console.warn('event', event, err);
  }
}

// ---- DOM helpers -------------------------------------------------------------

// h builds an element; attributes set properties or attributes, children
// are nodes or strings (as text).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const TONE = {
  Ready: 'ok', Available: 'ok', Running: 'ok', Present: 'ok', Applied: 'ok', Instantiated: 'ok', Updated: 'ok', Approved: 'ok',
  Synced: 'ok', appeared: 'ok', 'became ready': 'ok', healed: 'ok', adopted: 'ok',
  Pending: 'warn', Retrying: 'warn', Terminating: 'warn', Instantiating: 'warn', Updating: 'warn', Waiting: 'warn',
  OutOfSync: 'warn', 'became not ready': 'warn',
  NotPresent: 'bad', Missing: 'bad', Failed: 'bad', Unreachable: 'bad', InstantiateFailed: 'bad', TerminateFailed: 'bad', UpdateFailed: 'bad',
  Unknown: 'unk', Silent: 'unk', NotInstalled: 'unk', Created: 'unk', Terminated: 'unk', Deleted: 'unk', gone: 'unk',
};

function tone(s) { return TONE[s] || 'unk'; }

function badge(text, t) {
  return h('span', { class: 'badge ' + (t || tone(text)) }, text || '—');
}

function readyBadge(ready, readyStatus) {
  if (ready) return badge('Ready', 'ok');
  if (!readyStatus) return badge('no context', 'unk');
  return badge(readyStatus === 'Ready' ? 'Pending' : readyStatus);
}

// syncBadge sums up sync counts: how many drifted (OutOfSync or Missing),
// or Synced when all are.
function syncBadge(counts) {
  const c = counts || {};
  const drifted = (c.OutOfSync || 0) + (c.Missing || 0);
  if (drifted) return badge(drifted + ' drifted', c.Missing ? 'bad' : 'warn');
  if (c.Synced && Object.keys(c).length === 1) return badge('Synced');
  return badge(Object.keys(c).length ? 'Unknown' : '—', 'unk');
}

// One time format everywhere: local, with the zone.
const TIME = new Intl.DateTimeFormat(undefined, {
  year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', timeZoneName: 'short',
});

function when(t) {
  if (!t) return '';
  const d = new Date(t);
  return isNaN(d) ? t : TIME.format(d);
}

// localize shows the RFC 3339 times the API writes into reasons ("monitor
// silent since 2026-01-01T10:00:00Z") in the page's format.
function localize(s) {
  return (s || '').replace(/\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})/g, when);
}

function render(...nodes) {
  document.getElementById('view').replaceChildren(...nodes);
}

function showError(err) {
  if (err instanceof AuthError) {
    render(h('p', { class: 'muted' }, 'Waiting for an API token…'));
    return;
  }
  render(h('p', { class: 'error' }, String(err.message || err)));
}

function setLive(on) {
  const el = document.getElementById('live');
  el.className = 'live ' + (on ? 'on' : 'off');
  el.textContent = on ? 'live' : 'reconnecting…';
}

function debounce(fn, ms) {
  let timer = null;
  const run = () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
  active.push({ close() { clearTimeout(timer); } });
  return run;
}

// ---- what is wrong, in order -------------------------------------------------

// severity orders what is wrong, worst first: Failed; NotPresent or
// Missing; OutOfSync; Pending or Terminating; Unknown; then what is fine.
function severity(ready, sync) {
  if (ready === 'Failed') return 0;
  if (ready === 'NotPresent' || sync === 'Missing') return 1;
  if (sync === 'OutOfSync') return 2;
  if (ready === 'Pending' || ready === 'Terminating') return 3;
  if (ready === 'Unknown' || sync === 'Unknown') return 4;
  return 5;
}

function isWrong(r) { return severity(r['ready-status'], r.syncStatus) < 5; }

// believable reports a cluster whose resources can be told apart: reachable,
// its monitor running. Otherwise they are all Unknown for one reason.
function believable(c) {
  return (!c.connectivity || c.connectivity === 'Available') && (!c.monitor || c.monitor === 'Running');
}

function resourceKey(group, kind, namespace, name) { return [group, kind, namespace || '', name].join('/'); }

// ---- token -------------------------------------------------------------------

function askToken(message) {
  const dialog = document.getElementById('login');
  const err = document.getElementById('login-error');
  err.hidden = !message;
  err.textContent = message || '';
  if (!dialog.open) dialog.showModal();
}

function setupToken() {
  const form = document.getElementById('login-form');
  form.addEventListener('submit', () => {
    token = document.getElementById('token').value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    document.getElementById('token').value = '';
    document.getElementById('forget-token').hidden = !token;
    access = null;
    route();
  });
  const forget = document.getElementById('forget-token');
  forget.hidden = !token;
  forget.addEventListener('click', () => {
    token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    forget.hidden = true;
    access = null;
    route();
  });
}

// ---- overview --------------------------------------------------------------------

function subjectKey(s) {
  return s.kind === 'dig' ? 'dig:' + [s.project, s.compositeApp, s.compositeAppVersion, s.name].join('/') : 'instance:' + s.id;
}

function subjectHref(s) {
  return s.kind === 'dig'
    ? '#/dig/' + [s.project, s.compositeApp, s.compositeAppVersion, s.name].map(encodeURIComponent).join('/')
    : '#/instance/' + encodeURIComponent(s.id);
}

function subjectTitle(s) {
  return s.kind === 'dig'
    ? s.project + ' / ' + s.compositeApp + ' ' + s.compositeAppVersion + ' / ' + s.name
    : (s.name || s.id) + ' (' + s['rb-name'] + ' ' + s['rb-version'] + ', ' + s['cloud-region'] + ')';
}

function viewOverview() {
  render(h('h1', {}, 'Deployments'), h('p', { class: 'muted' }, 'Loading…'));
  stream('/v2/overview?watch=true', { overview: renderOverview });
}

function renderOverview(o) {
  const rows = [...o.deploymentIntentGroups, ...o.instances];
  const table = h('table', { id: 'overview' },
    h('thead', {}, h('tr', {}, ['Kind', 'Name', 'Lifecycle / context', 'Ready', 'Sync', 'Ready / total', 'Apps × clusters', 'What is wrong']
      .map((c) => h('th', {}, c)))),
    h('tbody', {}, rows.map(overviewRow)));
  const counts = rows.reduce((n, s) => { n[s.ready ? 'ready' : 'not']++; return n; }, { ready: 0, not: 0 });
  render(
    h('h1', {}, 'Deployments'),
    h('p', { class: 'muted' }, rows.length + ' deployment intent groups and instances: ' + counts.ready + ' ready, ' + counts.not + ' not ready.'),
    rows.length ? table : h('p', {}, 'Nothing is deployed yet.'));
}

// stateCell labels the two states a deployment has: the lifecycle (what
// the user did) and its context's status (what rsync did).
function stateCell(s) {
  return h('div', { class: 'states' },
    s.state ? h('span', { class: 'state', title: 'lifecycle state: the last user action' }, h('span', { class: 'label' }, 'lifecycle'), badge(s.state)) : '',
    s.status ? h('span', { class: 'state', title: "context status: what rsync did with it" }, h('span', { class: 'label' }, 'context'), badge(s.status)) : '');
}

function overviewRow(s) {
  const chips = h('div', { class: 'chips' });
  for (const a of s.apps) {
    for (const c of a.clusters) {
      const t = c.ready ? 'ok' : (believable(c) ? tone(c['ready-status']) : 'unk');
      chips.append(h('span', { class: 'chip ' + t, title: c['cluster-provider'] + '+' + c.cluster + (believable(c) ? '' : ': connectivity ' + c.connectivity + ', monitor ' + c.monitor) },
        a.name + '@' + c.cluster + ' ' + c['ready-count'] + '/' + c.total));
    }
  }
  return h('tr', { 'data-subject': subjectKey(s), 'data-ready': String(s.ready) },
    h('td', {}, s.kind === 'dig' ? 'DIG' : 'instance'),
    h('td', {}, h('a', { href: subjectHref(s), class: 'subject' }, subjectTitle(s))),
    h('td', {}, stateCell(s)),
    h('td', { class: 'ready' }, readyBadge(s.ready, s['ready-status'])),
    h('td', { class: 'sync' }, syncBadge(s['sync-counts'])),
    h('td', {}, s['ready-count'] + ' / ' + s.total),
    h('td', {}, chips),
    h('td', {}, notReadyList(s)));
}

// notReadyList leads with the cause: a cluster that cannot be believed is
// one grey line with its reason, however many of its resources it hides;
// the rest worst first.
function notReadyList(s) {
  const lost = new Map(); // cluster → {reason, count}
  for (const a of s.apps) {
    for (const c of a.clusters) {
      if (believable(c)) continue;
      const key = c['cluster-provider'] + '+' + c.cluster;
      const l = lost.get(key) || { count: 0, reason: '', summary: 'connectivity ' + c.connectivity + ', monitor ' + c.monitor };
      l.count += c.total - c['ready-count'];
      lost.set(key, l);
    }
  }
  const rest = [];
  for (const r of s['not-ready']) {
    const key = r['cluster-provider'] + '+' + r.cluster;
    if (lost.has(key) && r['ready-status'] === 'Unknown') {
      if (!lost.get(key).reason) lost.get(key).reason = r.reason;
      continue;
    }
    rest.push(r);
  }
  rest.sort((a, b) => severity(a['ready-status']) - severity(b['ready-status']) || (a.GVK.Kind + a.name).localeCompare(b.GVK.Kind + b.name));
  const list = h('ul', { class: 'notready' });
  for (const [key, l] of lost) {
    list.append(h('li', { 'data-cluster': key, 'data-unknown-cluster': 'true' }, badge('Unknown', 'unk'), ' cluster ' + key + ': ' +
      localize(l.reason || l.summary) + ' (' + l.count + ' resources)'));
  }
  for (const r of rest) {
    list.append(h('li', { 'data-resource': r.GVK.Kind + '/' + r.name, 'data-cluster': r['cluster-provider'] + '+' + r.cluster },
      badge(r['ready-status']), ' ', r.GVK.Kind + '/' + r.name, ' on ' + r.cluster + (r.reason ? ': ' + localize(r.reason) : '')));
  }
  const hidden = s['not-ready-count'] - s['not-ready'].length;
  if (hidden > 0) list.append(h('li', { class: 'muted' }, 'and ' + hidden + ' more'));
  return list;
}

// ---- drill-down: page state and its address ------------------------------------

const FILTERS = ['app', 'cluster', 'ready', 'sync', 'q', 'res'];

// A drill-down's filters live in its address (#/dig/…?app=…&cluster=…),
// so a copied link opens the same view; changing one replaces the address
// without a reload or a new history step.
function readFilters(params) {
  const f = {};
  for (const k of FILTERS) f[k] = params.get(k) || '';
  return f;
}

function writeFilters(page) {
  const qs = new URLSearchParams();
  for (const k of FILTERS) if (page.filters[k]) qs.set(k, page.filters[k]);
  const s = qs.toString();
  history.replaceState(null, '', '#' + page.path + (s ? '?' + s : ''));
}

function setFilter(page, changes) {
  Object.assign(page.filters, changes);
  writeFilters(page);
  syncFilterInputs(page);
  renderResources(page);
  renderHistory(page);
}

function viewSubject(kind, parts, params) {
  const subject = kind === 'dig'
    ? { kind, key: 'dig:' + parts.join('/'), title: parts[0] + ' / ' + parts[1] + ' ' + parts[2] + ' / ' + parts[3],
      base: '/v2/projects/' + encodeURIComponent(parts[0]) + '/composite-apps/' + encodeURIComponent(parts[1]) + '/' +
        encodeURIComponent(parts[2]) + '/deployment-intent-groups/' + encodeURIComponent(parts[3]),
      subs: 'subscriptions' }
    : { kind, key: 'instance:' + parts[0], title: 'instance ' + parts[0], base: '/v1/instance/' + encodeURIComponent(parts[0]), subs: 'subscription' };
  subject.url = subject.base + '/status';
  const page = { subject, path: '/' + kind + '/' + parts.map(encodeURIComponent).join('/'), status: null, history: new Map(),
    filters: readFilters(params) };
  render(h('h1', {}, subject.title), h('p', { class: 'muted' }, 'Loading…'));
  const refreshSubs = debounce(() => loadSubscriptions(page), 1500);
  const refreshInstance = debounce(() => loadInstance(page), 300);
  const loadHistory = async () => {
    try {
      const l = await api(subject.url + '/history');
      for (const e of l.history) page.history.set(e.seq, e);
      renderHistory(page);
    } catch (err) { if (!(err instanceof AuthError)) console.warn(err); }
  };
  const query = kind === 'dig' ? '?watch=true&type=cluster&output=all' : '?watch=true';
  const update = (d) => { if (kind === 'dig') { page.status = d; renderSubject(page); } else { refreshInstance(); } };
  stream(subject.url + query, {
    open: () => { loadHistory(); refreshSubs(); },
    snapshot: update,
    change: (d) => { update(d); refreshSubs(); },
    history: (e) => { page.history.set(e.seq, e); renderHistory(page); },
    error: (d) => showError(new Error(d.error)),
  });
  if (!access) loadAccess().then(() => renderActions(page));
}

// loadInstance turns a v1 instance's status (k8splugin's shape) and its
// overview summary into the drill-down's model: one app on one cluster,
// owners read from each object (a Pod's ReplicaSet, whose name and the
// pod's template hash give its Deployment).
async function loadInstance(page) {
  try {
    const [st, o] = await Promise.all([api(page.subject.url), api('/v2/overview')]);
    const id = page.subject.key.slice('instance:'.length);
    const sum = o.instances.find((s) => s.id === id) || {};
    const cluster = (sum.apps && sum.apps[0] && sum.apps[0].clusters[0]) || { 'cluster-provider': '_v1', cluster: sum['cloud-region'] || '' };
    page.status = {
      status: sum.status, state: null, ready: st.ready, syncCounts: st.syncCounts,
      apps: [{ name: sum['rb-name'] || 'app', ready: st.ready, clusters: [{ ...cluster, ready: st.ready,
        resources: st.resourcesStatus.map((r) => ({ GVK: r.GVK, name: r.name, 'ready-status': r['ready-status'], reason: r.reason,
          syncStatus: r.syncStatus, syncReason: r.syncReason, namespace: ((r.status || {}).metadata || {}).namespace,
          owners: ownersOf(r.status), live: r.status,
          'cluster-status': r['ready-status'] === 'NotPresent' ? 'NotPresent' : (r['ready-status'] === 'Unknown' ? 'Unknown' : 'Present') })) }] }],
    };
    renderSubject(page);
  } catch (err) {
    if (!(err instanceof AuthError)) showError(err);
  }
}

function ownersOf(obj) {
  const meta = (obj || {}).metadata || {};
  const refs = meta.ownerReferences || [];
  if (!refs.length) return [];
  const ref = refs.find((r) => r.controller) || refs[0];
  const [group, version] = (ref.apiVersion || '').includes('/') ? ref.apiVersion.split('/') : ['', ref.apiVersion];
  const out = [{ GVK: { Group: group, Version: version, Kind: ref.kind }, name: ref.name }];
  const hash = (meta.labels || {})['pod-template-hash'];
  if (ref.kind === 'ReplicaSet' && hash && ref.name.endsWith('-' + hash)) {
    out.push({ GVK: { Group: 'apps', Version: 'v1', Kind: 'Deployment' }, name: ref.name.slice(0, -hash.length - 1) });
  }
  return out;
}

function ensureSkeleton(page) {
  if (page.dom) return page.dom;
  const dom = {
    actions: h('div', { class: 'actions', id: 'actions' }),
    summary: h('div', { class: 'summary', id: 'subject-summary' }),
    filters: h('div', { class: 'filters', id: 'filters' }),
    problems: h('div', { id: 'problems-box' }),
    grid: h('div', { id: 'grid' }),
    resources: h('div', { id: 'resources' }),
    history: h('div', { id: 'history' }),
    subs: h('div', { id: 'subscriptions' }),
    panel: h('aside', { id: 'panel', hidden: true }),
  };
  const f = page.filters;
  dom.text = h('input', { type: 'search', placeholder: 'filter by kind, name or namespace', id: 'filter-text', value: f.q,
    oninput: (e) => setFilter(page, { q: e.target.value }) });
  dom.appSel = h('select', { id: 'filter-app', onchange: (e) => setFilter(page, { app: e.target.value }) });
  dom.clusterSel = h('select', { id: 'filter-cluster', onchange: (e) => setFilter(page, { cluster: e.target.value }) });
  dom.readySel = h('select', { id: 'filter-ready', onchange: (e) => setFilter(page, { ready: e.target.value }) },
    [['', 'any readiness'], ['not', 'not ready'], ['Failed', 'Failed'], ['NotPresent', 'NotPresent'], ['Pending', 'Pending'],
      ['Unknown', 'Unknown'], ['Ready', 'Ready']].map(([v, t]) => h('option', { value: v }, t)));
  dom.syncSel = h('select', { id: 'filter-sync', onchange: (e) => setFilter(page, { sync: e.target.value }) },
    [['', 'any sync'], ['not', 'not synced'], ['Missing', 'Missing'], ['OutOfSync', 'OutOfSync'], ['Unknown', 'Unknown'], ['Synced', 'Synced']]
      .map(([v, t]) => h('option', { value: v }, t)));
  const clear = h('button', { type: 'button', id: 'filter-clear', onclick: () => setFilter(page, { app: '', cluster: '', ready: '', sync: '', q: '' }) }, 'Clear filters');
  dom.filters.append(dom.text, dom.appSel, dom.clusterSel, dom.readySel, dom.syncSel, clear);
  render(h('div', { class: 'titlebar' }, h('h1', {}, page.subject.title), dom.actions), dom.summary,
    h('h2', {}, 'What is wrong'), dom.problems,
    h('h2', {}, 'Apps × clusters'), dom.grid,
    h('h2', {}, 'Resources'), dom.filters, dom.resources,
    h('h2', {}, 'History'), dom.history,
    h('h2', {}, 'Subscriptions'), dom.subs, dom.panel);
  page.dom = dom;
  renderActions(page);
  return dom;
}

function syncFilterInputs(page) {
  const d = page.dom;
  if (!d) return;
  const f = page.filters;
  if (d.text.value !== f.q) d.text.value = f.q;
  d.appSel.value = f.app;
  d.clusterSel.value = f.cluster;
  d.readySel.value = f.ready;
  d.syncSel.value = f.sync;
}

// ---- drill-down: model -------------------------------------------------------------

// model flattens the status into one entry per resource — {app, cluster,
// r, key, children, depth} — and arranges each app and cluster's entries
// as a tree by owner: a Pod under its ReplicaSet (a line of its own, the
// status does not list it) under its Deployment; a resource whose owners
// are all unlisted stays at the top.
function model(st) {
  const groups = [];
  for (const a of st.apps || []) {
    for (const c of a.clusters) {
      const cluster = c['cluster-provider'] + '+' + c.cluster;
      const byKey = new Map();
      const items = c.resources.map((r) => {
        const it = { app: a.name, cluster, r, children: [], key: a.name + '|' + cluster + '|' + resourceKey(r.GVK.Group, r.GVK.Kind, r.namespace, r.name) };
        byKey.set(resourceKey(r.GVK.Group, r.GVK.Kind, r.namespace, r.name), it);
        return it;
      });
      const top = [];
      for (const it of items) {
        const owners = it.r.owners || [];
        const listed = owners.findIndex((o) => byKey.has(resourceKey(o.GVK.Group, o.GVK.Kind, it.r.namespace, o.name)));
        if (listed < 0) { top.push(it); continue; }
        let parent = byKey.get(resourceKey(owners[listed].GVK.Group, owners[listed].GVK.Kind, it.r.namespace, owners[listed].name));
        for (let i = listed - 1; i >= 0; i--) {
          const o = owners[i];
          const k = resourceKey(o.GVK.Group, o.GVK.Kind, it.r.namespace, o.name);
          if (!byKey.has(k)) {
            const v = { app: a.name, cluster, virtual: true, children: [], key: a.name + '|' + cluster + '|' + k, parentKey: parent.key,
              r: { GVK: o.GVK, name: o.name, namespace: it.r.namespace, owners: owners.slice(i + 1) } };
            byKey.set(k, v);
            parent.children.push(v);
          }
          parent = byKey.get(k);
        }
        it.parentKey = parent.key;
        parent.children.push(it);
      }
      const order = (l) => { l.sort((x, y) => (x.r.GVK.Kind + '/' + x.r.name).localeCompare(y.r.GVK.Kind + '/' + y.r.name)); l.forEach((x) => order(x.children)); };
      order(top);
      groups.push({ app: a.name, cluster, c, items, top });
    }
  }
  return groups;
}

// problems lists what is wrong, the causes first: by severity, then a
// resource whose trouble comes from one it owns (a Deployment Failed for
// its crash-looping Pod) after every cause. A cluster that cannot be
// believed is one line with its reason, not one per resource.
function problems(groups) {
  const out = [];
  const lost = new Map(); // cluster → its one line
  for (const g of groups) {
    if (!believable(g.c)) {
      const r = g.items.find((x) => x.r.reason);
      let l = lost.get(g.cluster);
      if (!l) {
        l = { unknownCluster: true, apps: [], cluster: g.cluster, count: 0, reason: 'connectivity ' + g.c.connectivity + ', monitor ' + g.c.monitor };
        lost.set(g.cluster, l);
        out.push(l);
      }
      l.apps.push(g.app);
      l.count += g.items.length;
      if (r && l.reason.startsWith('connectivity ')) l.reason = r.r.reason;
      continue;
    }
    const walk = (l) => l.reduce((any, it) => {
      const below = walk(it.children);
      if (!it.virtual && isWrong(it.r)) {
        out.push({ ...it, derived: below });
        return true;
      }
      return any || below;
    }, false);
    walk(g.top);
  }
  const sev = (p) => (p.unknownCluster ? 4 : severity(p.r['ready-status'], p.r.syncStatus));
  out.sort((x, y) => (x.derived ? 1 : 0) - (y.derived ? 1 : 0) || sev(x) - sev(y) ||
    ((x.app || '') + x.cluster).localeCompare((y.app || '') + y.cluster) || (x.r ? x.r.GVK.Kind + x.r.name : '').localeCompare(y.r ? y.r.GVK.Kind + y.r.name : ''));
  return out;
}

// aggregate is the documented rule: any Failed, else any Unknown, else
// anything not Ready is Pending; "" for nothing.
function aggregate(statuses) {
  if (!statuses.length) return '';
  if (statuses.includes('Failed')) return 'Failed';
  if (statuses.includes('Unknown')) return 'Unknown';
  return statuses.every((s) => s === 'Ready') ? 'Ready' : 'Pending';
}

function fillSelect(sel, all, values, current) {
  sel.replaceChildren(h('option', { value: '' }, all), ...values.map((v) => h('option', { value: v }, v)));
  sel.value = values.includes(current) ? current : '';
}

// ---- drill-down: rendering -----------------------------------------------------------

function renderSubject(page) {
  const dom = ensureSkeleton(page);
  const st = page.status;
  page.groups = model(st);
  const all = page.groups.flatMap((g) => g.items);
  const ready = all.filter((x) => x.r['ready-status'] === 'Ready').length;
  const last = st.state && st.state.Actions && st.state.Actions.length ? st.state.Actions[st.state.Actions.length - 1].State : '';
  const syncCounts = st.syncCounts || all.reduce((n, x) => { if (x.r.syncStatus) n[x.r.syncStatus] = (n[x.r.syncStatus] || 0) + 1; return n; }, {});
  dom.summary.replaceChildren(
    page.subject.kind === 'dig' ? h('span', { class: 'state' }, h('span', { class: 'label' }, 'lifecycle'), last ? badge(last) : badge('Created')) : '',
    h('span', { class: 'state' }, h('span', { class: 'label' }, 'context'), badge(st.status || 'none')),
    h('span', { id: 'subject-ready', class: 'state' }, h('span', { class: 'label' }, 'ready'), readyBadge(st.ready, aggregate(all.map((x) => x.r['ready-status'])))),
    h('span', { id: 'subject-sync', class: 'state' }, h('span', { class: 'label' }, 'sync'), syncBadge(syncCounts)),
    h('span', {}, ready + ' of ' + all.length + ' resources Ready'));
  renderGrid(page);
  fillSelect(dom.appSel, 'every app', [...new Set(page.groups.map((g) => g.app))], page.filters.app);
  fillSelect(dom.clusterSel, 'every cluster', [...new Set(page.groups.map((g) => g.cluster))].sort(), page.filters.cluster);
  syncFilterInputs(page);
  renderProblems(page);
  renderResources(page);
  renderHistory(page);
  if (page.filters.res) openPanel(page, page.filters.res, false);
}

function renderGrid(page) {
  const cols = [...new Set(page.groups.map((g) => g.cluster))].sort();
  const apps = [...new Set(page.groups.map((g) => g.app))];
  const grid = h('table', { class: 'grid' }, h('thead', {}, h('tr', {}, h('th', {}, 'app'), cols.map((c) => h('th', {}, c)))));
  const body = h('tbody');
  for (const app of apps) {
    const row = h('tr', {}, h('th', {}, app));
    for (const col of cols) {
      const g = page.groups.find((x) => x.app === app && x.cluster === col);
      if (!g) { row.append(h('td', { class: 'muted' }, '—')); continue; }
      const n = g.items.filter((x) => x.r['ready-status'] === 'Ready').length;
      const t = believable(g.c) ? tone(g.c.ready ? 'Ready' : aggregate(g.items.map((x) => x.r['ready-status']))) : 'unk';
      row.append(h('td', { class: 'cell ' + t, title: believable(g.c) ? 'show these resources' : g.c.connectivity + ', monitor ' + g.c.monitor,
        'data-app': app, 'data-cluster': col, onclick: () => setFilter(page, { app, cluster: col }) },
      n + ' / ' + g.items.length, believable(g.c) ? '' : ' (' + (g.c.connectivity !== 'Available' ? g.c.connectivity : 'monitor ' + g.c.monitor) + ')'));
    }
    body.append(row);
  }
  grid.append(body);
  page.dom.grid.replaceChildren(grid);
}

function renderProblems(page) {
  const list = problems(page.groups);
  if (!list.length) {
    page.dom.problems.replaceChildren(h('p', { class: 'ok-text', id: 'problems-none' }, 'Nothing: every resource is Ready and Synced.'));
    return;
  }
  const table = h('table', { id: 'problems' },
    h('thead', {}, h('tr', {}, ['Ready', 'Sync', 'Resource', 'Namespace', 'App', 'Cluster', 'Reason'].map((c) => h('th', {}, c)))),
    h('tbody', {}, list.map((p) => {
      if (p.unknownCluster) {
        return h('tr', { 'data-cluster': p.cluster, 'data-unknown-cluster': 'true', class: 'clickable',
          onclick: () => setFilter(page, { app: '', cluster: p.cluster }) },
        h('td', {}, badge('Unknown', 'unk')), h('td', {}), h('td', {}, 'every resource on the cluster (' + p.count + ')'), h('td', {}),
        h('td', {}, p.apps.join(', ')), h('td', {}, p.cluster), h('td', {}, localize(p.reason)));
      }
      const r = p.r;
      return h('tr', { 'data-kind': r.GVK.Kind, 'data-name': r.name, 'data-app': p.app, 'data-cluster': p.cluster,
        'data-ready-status': r['ready-status'], 'data-sync-status': r.syncStatus || null, 'data-derived': p.derived ? 'true' : null,
        class: 'clickable', onclick: () => openPanel(page, p.key, true) },
      h('td', {}, badge(r['ready-status'])), h('td', {}, r.syncStatus ? badge(r.syncStatus) : ''),
      h('td', {}, r.GVK.Kind + '/' + r.name), h('td', {}, r.namespace || ''), h('td', {}, p.app), h('td', {}, p.cluster),
      h('td', {}, localize([r.reason, r.syncReason].filter(Boolean).join('; '))));
    })));
  page.dom.problems.replaceChildren(table);
}

// matches applies the filters to one resource.
function matches(f, it) {
  const r = it.r;
  if (f.app && it.app !== f.app) return false;
  if (f.cluster && it.cluster !== f.cluster) return false;
  if (f.ready && (f.ready === 'not' ? r['ready-status'] === 'Ready' || !r['ready-status'] : r['ready-status'] !== f.ready)) return false;
  if (f.sync && (f.sync === 'not' ? !r.syncStatus || r.syncStatus === 'Synced' : r.syncStatus !== f.sync)) return false;
  if (f.q && !(r.GVK.Kind + '/' + r.name + ' ' + (r.namespace || '')).toLowerCase().includes(f.q.toLowerCase())) return false;
  return true;
}

// renderResources draws each app and cluster's tree: the resources the
// filters pass, with the owners above them for context.
function renderResources(page) {
  if (!page.groups) return;
  const f = page.filters;
  const body = h('tbody');
  let shown = 0;
  let total = 0;
  for (const g of page.groups) {
    const rows = [];
    const draw = (l, depth) => l.reduce((any, it) => {
      const at = rows.length;
      const kids = draw(it.children, depth + 1);
      const self = !it.virtual && matches(f, it);
      if (!it.virtual) total++;
      if (self) shown++;
      if (self || kids) rows.splice(at, 0, resourceRow(page, it, depth, self));
      return any || self || kids;
    }, false);
    if (!draw(g.top, 0)) continue;
    const n = g.items.filter((x) => x.r['ready-status'] === 'Ready').length;
    body.append(h('tr', { class: 'group', 'data-group': g.app + '|' + g.cluster },
      h('th', { colspan: '8' }, g.app + ' on ' + g.cluster + ' — ' + n + ' of ' + g.items.length + ' Ready',
        believable(g.c) ? '' : h('span', { class: 'muted' }, ' · connectivity ' + g.c.connectivity + ', monitor ' + g.c.monitor))));
    body.append(...rows);
  }
  const table = h('table', { id: 'resource-table' },
    h('thead', {}, h('tr', {}, ['Resource', 'Namespace', 'Ready', 'Sync', 'rsync', 'Cluster status', 'Reason', ''].map((c) => h('th', {}, c)))), body);
  page.dom.resources.replaceChildren(table, h('p', { class: 'muted' }, shown + ' of ' + total + ' resources shown.'));
}

function resourceRow(page, it, depth, self) {
  const r = it.r;
  const rsync = r.deployedStatus || r['rsync-status'] || '';
  return h('tr', { 'data-app': it.app, 'data-cluster': it.cluster, 'data-kind': r.GVK.Kind, 'data-name': r.name,
    'data-namespace': r.namespace || null, 'data-depth': String(depth), 'data-virtual': it.virtual ? 'true' : null,
    'data-parent': it.parentKey || null,
    'data-cluster-status': it.virtual ? null : r['cluster-status'], 'data-ready-status': it.virtual ? null : r['ready-status'],
    'data-sync-status': r.syncStatus || null, class: (self ? 'clickable' : 'context') + ' d' + Math.min(depth, 8),
    onclick: it.virtual ? null : () => openPanel(page, it.key, true) },
  h('td', { class: 'tree' }, depth ? h('span', { class: 'branch' }, '└ ') : '', r.GVK.Kind + '/' + r.name),
  h('td', {}, r.namespace || ''),
  h('td', { class: 'ready-status' }, it.virtual ? '' : badge(r['ready-status'])),
  h('td', { class: 'sync-status', title: r.syncReason || '' }, r.syncStatus ? badge(r.syncStatus) : ''),
  h('td', { class: 'rsync-status' }, it.virtual ? '' : (rsync ? badge(rsync) : '—')),
  h('td', { class: 'cluster-status' }, it.virtual ? '' : badge(r['cluster-status'])),
  h('td', {}, it.virtual ? h('span', { class: 'muted' }, 'not listed: owned by ' + ownerText(r.owners)) : localize([r.reason, r.syncReason].filter(Boolean).join('; '))),
  h('td', {}, it.virtual ? '' : h('span', { class: 'more' }, '›')));
}

function ownerText(owners) {
  return (owners || []).map((o) => o.GVK.Kind + '/' + o.name).join(' ← ') || '—';
}

// ---- drill-down: history -------------------------------------------------------------

// change names what an entry changed, for its badge: an action's state; a
// context status, or became ready / not ready; a resource appearing, going,
// or its readiness, presence, rsync status or sync state moving.
function change(e) {
  const f = e.from || {};
  const t = e.to || {};
  switch (e.kind) {
    case 'action': return { text: t.state, tone: tone(t.state) };
    case 'status':
      if (e.from && f.status !== t.status) return { text: t.status, tone: tone(t.status) };
      if (!e.from) return { text: t.status || 'context', tone: tone(t.status) };
      return t.ready ? { text: 'became ready', tone: 'ok' } : { text: 'became not ready', tone: 'warn' };
    case 'heal': return { text: 'healed', tone: 'ok' };
    case 'adopt': return { text: 'adopted', tone: 'ok' };
    case 'resource':
      if (!e.to) return { text: 'gone', tone: 'unk' };
      if (!e.from) return { text: 'appeared ' + (t['ready-status'] || ''), tone: tone(t['ready-status']) };
      if (f['ready-status'] !== t['ready-status']) return { text: t['ready-status'], tone: tone(t['ready-status']) };
      if (f['cluster-status'] !== t['cluster-status']) return { text: t['cluster-status'], tone: tone(t['cluster-status']) };
      if (f['rsync-status'] !== t['rsync-status']) return { text: 'rsync ' + t['rsync-status'], tone: tone(t['rsync-status']) };
      return { text: t['sync-status'] || 'changed', tone: tone(t['sync-status']) };
  }
  return { text: e.kind, tone: 'unk' };
}

function describeEntry(e) {
  const side = (s) => {
    if (!s) return '—';
    if (e.kind === 'action') return s.state;
    if (e.kind === 'status') return (s.status || '') + (s.ready ? ', ready' : ', not ready');
    return [s['rsync-status'], s['cluster-status'], s['ready-status'], s['sync-status']].filter(Boolean).join(' / ');
  };
  const c = change(e);
  const where = e.resource ? e.resource.GVK.Kind + '/' + e.resource.name + ' (' + e.app + ' on ' + e['cluster-provider'] + '+' + e.cluster + ')' : '';
  let what;
  if (e.kind === 'heal' || e.kind === 'adopt') what = where;
  else if (e.kind === 'resource') what = where + ': ' + side(e.from) + ' → ' + side(e.to);
  else if (e.kind === 'action') what = 'action: ' + (e.from && e.from.state !== e.to.state ? e.from.state + ' → ' : '') + e.to.state;
  else what = 'context: ' + side(e.from) + ' → ' + side(e.to);
  return h('span', {}, badge(c.text, c.tone), ' ', what, e.reason ? h('span', { class: 'muted' }, ' — ' + localize(e.reason)) : '');
}

// historyMatches applies the filters to an entry: with any resource filter
// set only resource entries (and heals, adoptions) of matching resources
// pass; readiness and sync match either side of the move.
function historyMatches(f, e) {
  if (!f.app && !f.cluster && !f.ready && !f.sync && !f.q) return true;
  if (!e.resource) return false;
  const sides = [e.from || {}, e.to || {}];
  if (f.app && e.app !== f.app) return false;
  if (f.cluster && e['cluster-provider'] + '+' + e.cluster !== f.cluster) return false;
  if (f.q && !(e.resource.GVK.Kind + '/' + e.resource.name + ' ' + (e.resource.namespace || '')).toLowerCase().includes(f.q.toLowerCase())) return false;
  if (f.ready && !sides.some((s) => (f.ready === 'not' ? s['ready-status'] && s['ready-status'] !== 'Ready' : s['ready-status'] === f.ready))) return false;
  if (f.sync && !sides.some((s) => (f.sync === 'not' ? s['sync-status'] && s['sync-status'] !== 'Synced' : s['sync-status'] === f.sync))) return false;
  return true;
}

function timeline(entries, id) {
  return h('ol', { class: 'timeline', id }, entries.map((e) => {
    const c = change(e);
    return h('li', { 'data-kind': e.kind, 'data-resource': e.resource ? e.resource.GVK.Kind + '/' + e.resource.name : null,
      'data-cluster': e.resource ? e['cluster-provider'] + '+' + e.cluster : null, 'data-app': e.app || null,
      'data-change': c.text, 'data-to': e.to ? (e.to['cluster-status'] || e.to.status || e.to.state || '') : 'gone' },
    h('time', { datetime: e.time }, when(e.time)), describeEntry(e));
  }));
}

function renderHistory(page) {
  const dom = page.dom;
  if (!dom) return;
  const all = [...page.history.values()].sort((a, b) => (a.time === b.time ? b.seq - a.seq : (a.time < b.time ? 1 : -1)));
  const entries = all.filter((e) => historyMatches(page.filters, e));
  if (!entries.length) {
    dom.history.replaceChildren(h('p', { class: 'muted' }, all.length ? 'No transition passes the filters.' : 'No transitions recorded yet.'));
    return;
  }
  dom.history.replaceChildren(timeline(entries, 'timeline'),
    entries.length < all.length ? h('p', { class: 'muted' }, entries.length + ' of ' + all.length + ' entries pass the filters.') : '');
}

// ---- drill-down: the side panel ---------------------------------------------------------

function findItem(page, key) {
  for (const g of page.groups || []) {
    const it = g.items.find((x) => x.key === key);
    if (it) return it;
  }
  return null;
}

function closePanel(page) {
  page.panel = null;
  page.dom.panel.hidden = true;
  page.dom.panel.replaceChildren();
  setFilter(page, { res: '' });
}

// openPanel shows one resource: its state and reason, its owners, its live
// object (summed up, then whole), the manifest Argus applied, and its own
// history. A redraw of the same resource in the same state keeps what was
// loaded.
function openPanel(page, key, byUser) {
  const it = findItem(page, key);
  if (!it) return;
  const r = it.r;
  const sig = [r['ready-status'], r.syncStatus, r.reason, r['cluster-status'], r.deployedStatus].join('|');
  if (page.panel && page.panel.key === key && page.panel.sig === sig) return;
  const same = page.panel && page.panel.key === key;
  page.panel = { key, sig };
  if (byUser) {
    page.filters.res = key;
    writeFilters(page);
  }
  const panel = page.dom.panel;
  const live = same ? panel.querySelector('#panel-live') : h('section', { id: 'panel-live' }, h('p', { class: 'muted' }, 'Loading…'));
  const desired = same ? panel.querySelector('#panel-desired') : h('section', { id: 'panel-desired' }, h('p', { class: 'muted' }, 'Loading…'));
  const hist = h('section', { id: 'panel-history' }, h('p', { class: 'muted' }, 'Loading…'));
  panel.replaceChildren(
    h('div', { class: 'panel-head' }, h('h2', {}, r.GVK.Kind + '/' + r.name),
      h('button', { type: 'button', id: 'panel-close', title: 'close', onclick: () => closePanel(page) }, '×')),
    h('p', { class: 'muted' }, (r.namespace ? 'namespace ' + r.namespace + ' · ' : '') + it.app + ' on ' + it.cluster +
      ' · ' + (r.GVK.Group ? r.GVK.Group + '/' : '') + r.GVK.Version),
    h('div', { class: 'summary' },
      h('span', { class: 'state' }, h('span', { class: 'label' }, 'ready'), badge(r['ready-status'])),
      r.syncStatus ? h('span', { class: 'state' }, h('span', { class: 'label' }, 'sync'), badge(r.syncStatus)) : '',
      h('span', { class: 'state' }, h('span', { class: 'label' }, 'cluster'), badge(r['cluster-status'])),
      r.deployedStatus ? h('span', { class: 'state' }, h('span', { class: 'label' }, 'rsync'), badge(r.deployedStatus)) : ''),
    h('h3', {}, 'Reason'), h('p', { id: 'panel-reason' }, localize([r.reason, r.syncReason].filter(Boolean).join('; ')) || 'None: it is Ready.'),
    (r.owners || []).length ? h('p', {}, h('span', { class: 'label' }, 'owned by'), ' ' + ownerText(r.owners)) : '',
    h('h3', {}, 'Live'), live, h('h3', {}, 'Desired manifest'), desired, h('h3', {}, 'History'), hist);
  panel.hidden = false;
  panel.setAttribute('data-resource', r.GVK.Kind + '/' + r.name);
  panel.setAttribute('data-cluster', it.cluster);
  loadPanel(page, it, live, desired, hist, same);
}

async function loadPanel(page, it, live, desired, hist, same) {
  const r = it.r;
  const q = (type) => '?type=' + type + '&output=detail&app=' + encodeURIComponent(it.app) + '&cluster=' + encodeURIComponent(it.cluster) +
    '&resource=' + encodeURIComponent(r.GVK.Kind + '/' + r.name);
  const pick = (st) => {
    for (const a of st.apps || []) for (const c of a.clusters) for (const x of c.resources) if (x.GVK.Kind === r.GVK.Kind && x.name === r.name) return x;
    return null;
  };
  try {
    if (page.subject.kind === 'dig') {
      const [cl, rs] = await Promise.all([api(page.subject.url + q('cluster')), same ? null : api(page.subject.url + q('rsync'))]);
      const x = pick(cl);
      live.replaceChildren(...liveView(x && x.detail));
      if (rs) {
        const d = pick(rs);
        desired.replaceChildren(d && d.detail ? h('pre', { class: 'manifest' }, JSON.stringify(d.detail, null, 2))
          : h('p', { class: 'muted' }, 'None: Argus did not apply it; ' + (r.owners && r.owners.length ? ownerText(r.owners) + ' made it.' : 'a controller made it.')));
      }
    } else {
      live.replaceChildren(...liveView(r.live));
      desired.replaceChildren(h('p', { class: 'muted' }, "A v1 instance's status does not carry the manifests; GET /v1/instance/" +
        page.subject.key.slice('instance:'.length) + '?full=true lists what was rendered.'));
    }
    const hq = page.subject.kind === 'dig'
      ? '?app=' + encodeURIComponent(it.app) + '&cluster=' + encodeURIComponent(it.cluster) + '&resource=' + encodeURIComponent(r.GVK.Kind + '/' + r.name)
      : '?resource=' + encodeURIComponent(r.GVK.Kind + '/' + r.name);
    const l = await api(page.subject.url + '/history' + hq);
    const entries = l.history.slice().reverse();
    hist.replaceChildren(entries.length ? timeline(entries, 'panel-timeline') : h('p', { class: 'muted' }, 'No transitions recorded.'));
  } catch (err) {
    if (!(err instanceof AuthError)) live.replaceChildren(h('p', { class: 'error' }, String(err.message || err)));
  }
}

// liveView sums up a live object — phase, replicas, conditions, containers —
// then shows it whole.
function liveView(obj) {
  if (!obj) return [h('p', { class: 'muted' }, 'Not on the cluster (or the cluster cannot be believed now).')];
  const st = obj.status || {};
  const rows = [];
  const add = (k, v) => { if (v !== undefined && v !== null && v !== '') rows.push(h('dt', {}, k), h('dd', {}, String(v))); };
  add('phase', st.phase);
  if (obj.spec && obj.spec.replicas !== undefined) {
    add('replicas', 'want ' + obj.spec.replicas + ', ready ' + (st.readyReplicas || 0) + ', updated ' + (st.updatedReplicas || 0) + ', available ' + (st.availableReplicas || 0));
  }
  for (const c of st.conditions || []) add('condition ' + c.type, c.status + (c.reason ? ' (' + c.reason + ')' : '') + (c.message ? ': ' + c.message : ''));
  for (const c of st.containerStatuses || []) {
    const state = Object.keys(c.state || {})[0] || '';
    const why = state && c.state[state] && c.state[state].reason ? ' ' + c.state[state].reason : '';
    add('container ' + c.name, (c.ready ? 'ready' : 'not ready') + ', restarts ' + (c.restartCount || 0) + (state ? ', ' + state + why : ''));
  }
  if (obj.data) add('data keys', Object.keys(obj.data).join(', '));
  const meta = obj.metadata || {};
  add('created', when(meta.creationTimestamp));
  return [rows.length ? h('dl', { class: 'live-summary' }, rows) : h('p', { class: 'muted' }, 'Nothing to sum up: it has no status.'),
    h('details', {}, h('summary', {}, 'the whole object'), h('pre', { class: 'manifest' }, JSON.stringify(obj, null, 2)))];
}

// ---- drill-down: actions ------------------------------------------------------------------

// The actions the API has, each behind a confirmation, offered only to a
// token that may write (GET /v2/access).
function actionsOf(subject) {
  if (subject.kind === 'instance') {
    return [{ id: 'sync', label: 'Sync', path: subject.base + '/sync', confirm: 'Re-apply what drifted (OutOfSync or Missing) in ' + subject.title + '?' }];
  }
  return [
    { id: 'sync', label: 'Sync', path: subject.base + '/sync', confirm: 'Re-apply what drifted (OutOfSync or Missing) in ' + subject.title + '?' },
    { id: 'update', label: 'Update', path: subject.base + '/update', confirm: 'Render ' + subject.title + ' again from its apps, profiles and intents, and apply the difference?' },
    { id: 'terminate', label: 'Terminate', path: subject.base + '/terminate', danger: true,
      confirm: 'Terminate ' + subject.title + '? Every resource it applied is deleted from every cluster.' },
  ];
}

function renderActions(page) {
  const box = page.dom && page.dom.actions;
  if (!box) return;
  if (!access || !access.write) {
    box.replaceChildren(access ? h('span', { class: 'muted', title: 'this token may only read' }, 'read-only') : '');
    return;
  }
  box.replaceChildren(...actionsOf(page.subject).map((a) => h('button', { type: 'button', id: 'action-' + a.id,
    class: a.danger ? 'danger' : '', onclick: () => confirmAction(page, a) }, a.label)));
}

function confirmAction(page, a) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = a.confirm;
  const ok = document.getElementById('confirm-ok');
  ok.textContent = a.label;
  ok.className = a.danger ? 'danger' : '';
  dialog.returnValue = '';
  dialog.onclose = async () => {
    if (dialog.returnValue !== 'ok') return;
    const out = h('span', { class: 'muted', id: 'action-result' }, a.label + '…');
    page.dom.actions.append(out);
    try {
      const resp = await fetch(a.path, { method: 'POST', headers: { ...headers(), 'Content-Type': 'application/json' }, body: '{}', cache: 'no-store' });
      const text = (await resp.text()).trim();
      out.className = resp.ok ? 'ok-text' : 'bad-text';
      out.textContent = a.label + ': ' + resp.status + (resp.ok ? ' accepted' : ' ' + text);
      if (resp.ok && a.id === 'sync') {
        try {
          const n = (JSON.parse(text).resources || []).length;
          out.textContent = a.label + ': ' + (n ? 're-applying ' + n + ' resources' : 'nothing drifted');
        } catch (err) { /* a body that is not JSON: the status says enough */ }
      }
    } catch (err) {
      out.className = 'bad-text';
      out.textContent = a.label + ': ' + err.message;
    }
  };
  dialog.showModal();
}

async function loadSubscriptions(page) {
  if (!page.dom) return;
  try {
    const l = await api(page.subject.url + '/' + page.subject.subs);
    page.dom.subs.replaceChildren(l.length ? h('table', {},
      h('thead', {}, h('tr', {}, ['Name', 'Callback', 'Last delivery', 'At', 'Pending', 'Sequence', 'Last error'].map((c) => h('th', {}, c)))),
      h('tbody', {}, l.map((s) => {
        const code = s['last-notify-status'];
        const t = code === 0 ? 'unk' : (code >= 200 && code < 300 ? 'ok' : 'bad');
        return h('tr', { 'data-subscription': s.name }, h('td', {}, s.name), h('td', {}, s['callback-url']),
          h('td', {}, badge(code === 0 ? 'none yet' : String(code), t)), h('td', {}, code === 0 ? '' : when(s['last-notify-time'])),
          h('td', {}, s.delivery.pending ? badge('pending', 'warn') : 'no'), h('td', {}, String(s.delivery.sequence)),
          h('td', {}, localize(s.delivery['last-error'] || '')));
      }))) : h('p', { class: 'muted' }, 'No subscriptions.'));
  } catch (err) {
    if (!(err instanceof AuthError)) page.dom.subs.replaceChildren(h('p', { class: 'error' }, String(err.message)));
  }
}

// ---- clusters ------------------------------------------------------------------------

// viewClusters reads the clusters at once, then again after each overview
// event (at most every 300 ms).
function viewClusters() {
  render(h('h1', {}, 'Clusters'), h('p', { class: 'muted' }, 'Loading…'));
  const load = async () => {
    try {
      renderClusters(await api('/v2/overview/clusters'));
    } catch (err) { showError(err); }
  };
  const refresh = debounce(load, 300);
  let first = true;
  load();
  stream('/v2/overview?watch=true', { overview: () => { if (first) { first = false; return; } refresh(); } });
}

function renderClusters(o) {
  const rows = o.clusters.map((c) => h('tr', { 'data-cluster': c['cluster-provider'] + '+' + c.cluster },
    h('td', {}, c['cluster-provider'] === '_v1' ? 'cloud region' : c['cluster-provider']), h('td', {}, c.cluster),
    h('td', {}, badge(c.connectivity)), h('td', {}, badge(c.monitor)), h('td', {}, when(c['last-seen'])),
    h('td', {}, String(c.contexts)),
    h('td', {}, !c['watcher-owner'] ? h('span', { class: 'muted' }, 'none (nothing deployed)')
      : (c['watcher-owner'] === o.replica ? 'this replica' : c['watcher-owner'])),
    h('td', {}, localize(c.reason || ''))));
  render(h('h1', {}, 'Clusters'),
    h('p', { class: 'muted' }, 'Answered by replica ' + o.replica + '.'),
    rows.length ? h('table', { id: 'clusters' },
      h('thead', {}, h('tr', {}, ['Provider', 'Cluster', 'Connectivity', 'Monitor', 'Last seen', 'Live contexts', 'Watcher', 'Reason'].map((c) => h('th', {}, c)))),
      h('tbody', {}, rows)) : h('p', {}, 'No clusters registered.'));
}

// ---- routing ---------------------------------------------------------------------------

function route() {
  for (const a of active) a.close();
  active = [];
  const [path, query] = location.hash.replace(/^#/, '').split('?');
  const parts = path.replace(/^\//, '').split('/').filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || '');
  document.getElementById('nav-overview').classList.toggle('current', parts[0] !== 'clusters');
  document.getElementById('nav-clusters').classList.toggle('current', parts[0] === 'clusters');
  try {
    if (parts[0] === 'clusters') viewClusters();
    else if (parts[0] === 'dig' && parts.length === 5) viewSubject('dig', parts.slice(1), params);
    else if (parts[0] === 'instance' && parts.length === 2) viewSubject('instance', parts.slice(1), params);
    else viewOverview();
  } catch (err) {
    showError(err);
  }
}

document.addEventListener('DOMContentLoaded', () => {
  setupToken();
  window.addEventListener('hashchange', route);
  route();
});
