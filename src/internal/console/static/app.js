// Argus console: plain JavaScript, no dependencies. Every API call sends
// the bearer token (kept in sessionStorage) in a header; streams are the
// API's Server-Sent Events read with fetch, since EventSource cannot send
// headers. Data only ever reaches the page as text nodes, never as HTML.
'use strict';

const TOKEN_KEY = 'argus-api-token';
let token = sessionStorage.getItem(TOKEN_KEY) || '';
let active = []; // what the current view must stop when it is left: streams, timers

class AuthError extends Error {}

// ---- API -------------------------------------------------------------------

function headers() {
  return token ? { Authorization: 'Bearer ' + token } : {};
}

async function api(path) {
  const resp = await fetch(path, { headers: headers(), cache: 'no-store' });
  if (resp.status === 401) {
    askToken(token ? 'The token was refused.' : '');
    throw new AuthError('authentication required');
  }
  if (!resp.ok) {
    throw new Error(path + ' answered ' + resp.status + ': ' + (await resp.text()).trim());
  }
  return resp.json();
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
  Pending: 'warn', NotPresent: 'warn', Retrying: 'warn', Silent: 'warn', Terminating: 'warn', Instantiating: 'warn', Updating: 'warn',
  Waiting: 'warn', Created: 'unk', Terminated: 'unk', Deleted: 'unk',
  Failed: 'bad', Unreachable: 'bad', InstantiateFailed: 'bad', TerminateFailed: 'bad', UpdateFailed: 'bad',
  Synced: 'ok', OutOfSync: 'warn', Missing: 'bad',
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

function when(t) {
  if (!t) return '';
  const d = new Date(t);
  return isNaN(d) ? t : d.toLocaleString();
}

function render(...nodes) {
  const view = document.getElementById('view');
  view.replaceChildren(...nodes);
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
    route();
  });
  const forget = document.getElementById('forget-token');
  forget.hidden = !token;
  forget.addEventListener('click', () => {
    token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    forget.hidden = true;
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
    h('thead', {}, h('tr', {}, ['Kind', 'Name', 'State', 'Ready', 'Sync', 'Ready / total', 'Apps × clusters', 'Not ready'].map((c) => h('th', {}, c)))),
    h('tbody', {}, rows.map(overviewRow)));
  const counts = rows.reduce((n, s) => { n[s.ready ? 'ready' : 'not']++; return n; }, { ready: 0, not: 0 });
  render(
    h('h1', {}, 'Deployments'),
    h('p', { class: 'muted' }, rows.length + ' deployment intent groups and instances: ' + counts.ready + ' ready, ' + counts.not + ' not ready.'),
    rows.length ? table : h('p', {}, 'Nothing is deployed yet.'));
}

function overviewRow(s) {
  const chips = h('div', { class: 'chips' });
  for (const a of s.apps) {
    for (const c of a.clusters) {
      chips.append(h('span', { class: 'chip ' + (c.ready ? 'ok' : tone(c['ready-status'])), title: c['cluster-provider'] + '+' + c.cluster },
        a.name + '@' + c.cluster + ' ' + c['ready-count'] + '/' + c.total));
    }
  }
  const notReady = h('ul', { class: 'notready' }, s['not-ready'].map((r) =>
    h('li', { 'data-resource': r.GVK.Kind + '/' + r.name },
      badge(r['ready-status']), ' ', r.GVK.Kind + '/' + r.name, ' on ' + r.cluster + (r.reason ? ': ' + r.reason : ''))));
  if (s['not-ready-count'] > s['not-ready'].length) {
    notReady.append(h('li', { class: 'muted' }, 'and ' + (s['not-ready-count'] - s['not-ready'].length) + ' more'));
  }
  return h('tr', { 'data-subject': subjectKey(s), 'data-ready': String(s.ready) },
    h('td', {}, s.kind === 'dig' ? 'DIG' : 'instance'),
    h('td', {}, h('a', { href: subjectHref(s), class: 'subject' }, subjectTitle(s))),
    h('td', {}, s.state ? h('span', { title: 'lifecycle state' }, badge(s.state)) : '', ' ',
      s.status ? h('span', { title: 'context status' }, badge(s.status)) : ''),
    h('td', { class: 'ready' }, readyBadge(s.ready, s['ready-status'])),
    h('td', { class: 'sync' }, syncBadge(s['sync-counts'])),
    h('td', {}, s['ready-count'] + ' / ' + s.total),
    h('td', {}, chips),
    h('td', {}, notReady));
}

// ---- drill-down ------------------------------------------------------------------

function viewSubject(kind, parts) {
  const subject = kind === 'dig'
    ? { kind, key: 'dig:' + parts.join('/'), title: parts[0] + ' / ' + parts[1] + ' ' + parts[2] + ' / ' + parts[3],
      url: '/v2/projects/' + parts.map(encodeURIComponent).slice(0, 2).join('/composite-apps/') + '/' + encodeURIComponent(parts[2]) +
        '/deployment-intent-groups/' + encodeURIComponent(parts[3]) + '/status',
      subs: 'subscriptions' }
    : { kind, key: 'instance:' + parts[0], title: 'instance ' + parts[0], url: '/v1/instance/' + encodeURIComponent(parts[0]) + '/status', subs: 'subscription' };
  const page = { subject, status: null, instance: null, history: new Map(), filters: { text: '', app: '', cluster: '', ready: '' } };
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
  stream(subject.url + query, {
    open: () => { loadHistory(); refreshSubs(); },
    snapshot: (d) => { if (kind === 'dig') { page.status = d; renderSubject(page); } else { refreshInstance(); } },
    change: (d) => { if (kind === 'dig') { page.status = d; renderSubject(page); } else { refreshInstance(); } refreshSubs(); },
    history: (e) => { page.history.set(e.seq, e); renderHistory(page); },
    error: (d) => showError(new Error(d.error)),
  });
}

// loadInstance turns a v1 instance's status (k8splugin's shape) and its
// overview summary into the drill-down's model.
async function loadInstance(page) {
  try {
    const [st, o] = await Promise.all([api(page.subject.url), api('/v2/overview')]);
    const id = page.subject.key.slice('instance:'.length);
    const sum = o.instances.find((s) => s.id === id) || {};
    const cluster = (sum.apps && sum.apps[0] && sum.apps[0].clusters[0]) || { 'cluster-provider': '_v1', cluster: sum['cloud-region'] || '' };
    page.status = {
      status: sum.status, state: null, ready: st.ready,
      apps: [{ name: sum['rb-name'] || 'app', ready: st.ready, clusters: [{ ...cluster, ready: st.ready,
        resources: st.resourcesStatus.map((r) => ({ GVK: r.GVK, name: r.name, 'ready-status': r['ready-status'], reason: r.reason,
          syncStatus: r.syncStatus, syncReason: r.syncReason,
          'cluster-status': r['ready-status'] === 'NotPresent' ? 'NotPresent' : (r['ready-status'] === 'Unknown' ? 'Unknown' : 'Present') })) }] }],
    };
    renderSubject(page);
  } catch (err) {
    if (!(err instanceof AuthError)) showError(err);
  }
}

function ensureSkeleton(page) {
  if (page.dom) return page.dom;
  const dom = {
    summary: h('div', { class: 'summary', id: 'subject-summary' }),
    grid: h('div', { id: 'grid' }),
    filters: h('div', { class: 'filters' }),
    resources: h('div', { id: 'resources' }),
    history: h('div', { id: 'history' }),
    subs: h('div', { id: 'subscriptions' }),
  };
  const f = page.filters;
  const text = h('input', { type: 'search', placeholder: 'filter by kind or name', id: 'filter-text',
    oninput: (e) => { f.text = e.target.value.toLowerCase(); renderResources(page); } });
  dom.appSel = h('select', { id: 'filter-app', onchange: (e) => { f.app = e.target.value; renderResources(page); } });
  dom.clusterSel = h('select', { id: 'filter-cluster', onchange: (e) => { f.cluster = e.target.value; renderResources(page); } });
  const readySel = h('select', { id: 'filter-ready', onchange: (e) => { f.ready = e.target.value; renderResources(page); } },
    [['', 'any readiness'], ['not', 'not ready'], ['Ready', 'Ready'], ['Pending', 'Pending'], ['NotPresent', 'NotPresent'], ['Failed', 'Failed'], ['Unknown', 'Unknown']]
      .map(([v, t]) => h('option', { value: v }, t)));
  dom.filters.append(text, dom.appSel, dom.clusterSel, readySel);
  render(h('h1', {}, page.subject.title), dom.summary,
    h('h2', {}, 'Apps × clusters'), dom.grid,
    h('h2', {}, 'Resources'), dom.filters, dom.resources,
    h('h2', {}, 'History'), dom.history,
    h('h2', {}, 'Subscriptions'), dom.subs);
  page.dom = dom;
  return dom;
}

function renderSubject(page) {
  const dom = ensureSkeleton(page);
  const st = page.status;
  const resources = [];
  const clusters = new Set();
  for (const a of st.apps || []) {
    for (const c of a.clusters) {
      clusters.add(c['cluster-provider'] + '+' + c.cluster);
      for (const r of c.resources) resources.push({ app: a.name, cluster: c['cluster-provider'] + '+' + c.cluster, r });
    }
  }
  page.resources = resources;
  const ready = resources.filter((x) => x.r['ready-status'] === 'Ready').length;
  const last = st.state && st.state.Actions && st.state.Actions.length ? st.state.Actions[st.state.Actions.length - 1].State : '';
  dom.summary.replaceChildren(
    h('span', {}, 'state ', last ? badge(last) : badge('Created')),
    h('span', {}, 'status ', badge(st.status || 'none')),
    h('span', { id: 'subject-ready' }, 'ready ', readyBadge(st.ready, aggregate(resources.map((x) => x.r['ready-status'])))),
    h('span', { id: 'subject-sync' }, 'sync ', syncBadge(resources.reduce((n, x) => {
      if (x.r.syncStatus) n[x.r.syncStatus] = (n[x.r.syncStatus] || 0) + 1;
      return n;
    }, {}))),
    h('span', {}, ready + ' of ' + resources.length + ' resources Ready'));
  // apps × clusters grid
  const cols = [...clusters].sort();
  const grid = h('table', { class: 'grid' }, h('thead', {}, h('tr', {}, h('th', {}, 'app'), cols.map((c) => h('th', {}, c)))));
  const body = h('tbody');
  for (const a of st.apps || []) {
    const row = h('tr', {}, h('th', {}, a.name));
    for (const col of cols) {
      const c = a.clusters.find((x) => x['cluster-provider'] + '+' + x.cluster === col);
      if (!c) { row.append(h('td', { class: 'muted' }, '—')); continue; }
      const n = c.resources.filter((r) => r['ready-status'] === 'Ready').length;
      row.append(h('td', { class: 'cell ' + (c.ready ? 'ok' : 'warn'), title: 'show these resources',
        onclick: () => { page.filters.app = a.name; page.filters.cluster = col; dom.appSel.value = a.name; dom.clusterSel.value = col; renderResources(page); } },
      n + ' / ' + c.resources.length, c.connectivity && c.connectivity !== 'Available' ? ' (' + c.connectivity + ')' : ''));
    }
    body.append(row);
  }
  grid.append(body);
  dom.grid.replaceChildren(grid);
  fillSelect(dom.appSel, 'every app', (st.apps || []).map((a) => a.name), page.filters.app);
  fillSelect(dom.clusterSel, 'every cluster', cols, page.filters.cluster);
  renderResources(page);
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

function renderResources(page) {
  const f = page.filters;
  const rows = (page.resources || []).filter(({ app, cluster, r }) =>
    (!f.app || app === f.app) && (!f.cluster || cluster === f.cluster) &&
    (!f.ready || (f.ready === 'not' ? r['ready-status'] !== 'Ready' : r['ready-status'] === f.ready)) &&
    (!f.text || (r.GVK.Kind + '/' + r.name).toLowerCase().includes(f.text)));
  const table = h('table', { id: 'resource-table' },
    h('thead', {}, h('tr', {}, ['App', 'Cluster', 'Kind', 'Name', 'rsync', 'Cluster status', 'Ready', 'Sync', 'Reason'].map((c) => h('th', {}, c)))),
    h('tbody', {}, rows.map(({ app, cluster, r }) => {
      const rsync = r.deployedStatus || r['rsync-status'] || '';
      return h('tr', { 'data-app': app, 'data-cluster': cluster, 'data-kind': r.GVK.Kind, 'data-name': r.name,
        'data-cluster-status': r['cluster-status'], 'data-ready-status': r['ready-status'], 'data-sync-status': r.syncStatus || null },
        h('td', {}, app), h('td', {}, cluster), h('td', {}, r.GVK.Kind), h('td', {}, r.name),
        h('td', { class: 'rsync-status' }, rsync ? badge(rsync) : '—'),
        h('td', { class: 'cluster-status' }, badge(r['cluster-status'])),
        h('td', { class: 'ready-status' }, badge(r['ready-status'])),
        h('td', { class: 'sync-status', title: r.syncReason || '' }, r.syncStatus ? badge(r.syncStatus) : '—'),
        h('td', {}, [r.reason, r.syncReason].filter(Boolean).join('; ')));
    })));
  page.dom.resources.replaceChildren(table, h('p', { class: 'muted' }, rows.length + ' of ' + (page.resources || []).length + ' resources shown.'));
}

function describeEntry(e) {
  const side = (s) => {
    if (!s) return '—';
    if (e.kind === 'action') return s.state;
    if (e.kind === 'status') return (s.status || '') + (s.ready ? ', ready' : ', not ready');
    return [s['rsync-status'], s['cluster-status'], s['ready-status'], s['sync-status']].filter(Boolean).join(' / ');
  };
  if (e.kind === 'heal' || e.kind === 'adopt') {
    const where = e.resource.GVK.Kind + '/' + e.resource.name + ' (' + e.app + ' on ' + e['cluster-provider'] + '+' + e.cluster + ')';
    return h('span', {}, badge(e.kind === 'heal' ? 'healed' : 'adopted', 'ok'), ' ', where, e.reason ? h('span', { class: 'muted' }, ' — ' + e.reason) : '');
  }
  let what;
  if (e.kind === 'resource') what = e.resource.GVK.Kind + '/' + e.resource.name + ' (' + e.app + ' on ' + e['cluster-provider'] + '+' + e.cluster + ')';
  else if (e.kind === 'action') what = 'action';
  else what = 'status';
  let b;
  if (!e.to) b = badge('gone', 'unk');
  else if (e.kind === 'resource') b = badge(e.to['ready-status']);
  else if (e.kind === 'action') b = badge(e.to.state);
  else b = e.to.ready ? badge('Ready', 'ok') : badge(e.to.status, tone(e.to.status) === 'ok' ? 'warn' : tone(e.to.status));
  return h('span', {}, b, ' ', what + ': ' + side(e.from) + ' → ' + side(e.to), e.reason ? h('span', { class: 'muted' }, ' — ' + e.reason) : '');
}

function renderHistory(page) {
  const dom = page.dom;
  if (!dom) return;
  const entries = [...page.history.values()].sort((a, b) => (a.time === b.time ? b.seq - a.seq : (a.time < b.time ? 1 : -1)));
  if (!entries.length) {
    dom.history.replaceChildren(h('p', { class: 'muted' }, 'No transitions recorded yet.'));
    return;
  }
  dom.history.replaceChildren(h('ol', { class: 'timeline', id: 'timeline' }, entries.map((e) =>
    h('li', { 'data-kind': e.kind, 'data-resource': e.resource ? e.resource.GVK.Kind + '/' + e.resource.name : null,
      'data-cluster': e.resource ? e['cluster-provider'] + '+' + e.cluster : null,
      'data-to': e.to ? (e.to['cluster-status'] || e.to.status || e.to.state || '') : 'gone' },
    h('time', { datetime: e.time }, when(e.time)), describeEntry(e)))));
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
          h('td', {}, s.delivery['last-error'] || ''));
      }))) : h('p', { class: 'muted' }, 'No subscriptions.'));
  } catch (err) {
    if (!(err instanceof AuthError)) page.dom.subs.replaceChildren(h('p', { class: 'error' }, String(err.message)));
  }
}

// ---- clusters ------------------------------------------------------------------------

function viewClusters() {
  render(h('h1', {}, 'Clusters'), h('p', { class: 'muted' }, 'Loading…'));
  const load = async () => {
    try {
      renderClusters(await api('/v2/overview/clusters'));
    } catch (err) { showError(err); }
  };
  const refresh = debounce(load, 300);
  stream('/v2/overview?watch=true', { overview: refresh });
}

function renderClusters(o) {
  const rows = o.clusters.map((c) => h('tr', { 'data-cluster': c['cluster-provider'] + '+' + c.cluster },
    h('td', {}, c['cluster-provider'] === '_v1' ? 'cloud region' : c['cluster-provider']), h('td', {}, c.cluster),
    h('td', {}, badge(c.connectivity)), h('td', {}, badge(c.monitor)), h('td', {}, when(c['last-seen'])),
    h('td', {}, String(c.contexts)),
    h('td', {}, !c['watcher-owner'] ? h('span', { class: 'muted' }, 'none (nothing deployed)')
      : (c['watcher-owner'] === o.replica ? 'this replica' : c['watcher-owner'])),
    h('td', {}, c.reason || '')));
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
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  document.getElementById('nav-overview').classList.toggle('current', parts[0] !== 'clusters');
  document.getElementById('nav-clusters').classList.toggle('current', parts[0] === 'clusters');
  try {
    if (parts[0] === 'clusters') viewClusters();
    else if (parts[0] === 'dig' && parts.length === 5) viewSubject('dig', parts.slice(1));
    else if (parts[0] === 'instance' && parts.length === 2) viewSubject('instance', parts.slice(1));
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
