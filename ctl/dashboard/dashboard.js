// gdt's dashboard: polls /api/status (the JSON of `gdt-coord status --all
// --json`) and draws hosts, the queue, gangs and recent events. Every value
// from the coordinator is written with textContent: names and reasons come
// from jobs and must never become markup.
'use strict';

const kPollMs = 2000;
const kMaxEvents = 50;

const view = {
  token: null,
  gangStates: new Map(),  // gang id -> state seen at the last poll
  events: [],             // {timeMs, text, kind}, newest first
  serverOffsetMs: 0,      // server clock minus browser clock
  polls: 0,
};

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('data-')) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

// The token from /#token=..., else the one this tab kept. False when the
// address holds one that is not valid %-encoding: the page then says so
// instead of polling without it.
function readToken() {
  const match = /(?:^#|&)token=([^&]+)/.exec(window.location.hash);
  if (!match) {
    view.token = sessionStorage.getItem('gdt-token');
    return true;
  }
  history.replaceState(null, '', window.location.pathname);
  try {
    view.token = decodeURIComponent(match[1]);
  } catch (error) {
    sessionStorage.removeItem('gdt-token');
    return false;
  }
  sessionStorage.setItem('gdt-token', view.token);
  return true;
}

function gangColour(id) {
  let hash = 0;
  for (let i = 0; i < id.length; i++) hash = (hash * 31 + id.charCodeAt(i)) >>> 0;
  return `hsl(${hash % 360}, 62%, 46%)`;
}

function age(thenMs) {
  if (!thenMs) return '-';
  const s = Math.max(0, Math.round((Date.now() + view.serverOffsetMs - thenMs) / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}


function badge(state) { return el('span', {class: `badge ${state}`, text: state}); }

// host name -> {gpu index -> gang id}, and host name -> running members.
function leases(gangs) {
  const gpus = new Map();
  const slots = new Map();
  for (const gang of gangs) {
    if (gang.finished) continue;
    for (const member of gang.members) {
      if (!member.host || member.left) continue;
      if (!gpus.has(member.host)) gpus.set(member.host, new Map());
      for (const gpu of member.gpus) gpus.get(member.host).set(gpu, gang.gang_id);
      if (gang.state === 'running' && member.node_rank >= 0) {
        if (!slots.has(member.host)) slots.set(member.host, []);
        slots.get(member.host).push(gang.gang_id);
      }
    }
  }
  return {gpus, slots};
}

function cell(index, gangId, what) {
  const node = el('div', {class: 'cell', text: String(index), 'data-gang': gangId || ''});
  if (gangId) {
    node.classList.add('leased');
    node.style.background = gangColour(gangId);
    node.title = `${what} ${index}: gang ${gangId}`;
  } else {
    node.title = `${what} ${index}: free`;
  }
  return node;
}

function renderSummary(status) {
  const s = status.summary;
  const gangs = {};
  for (const gang of status.gangs) gangs[gang.state] = (gangs[gang.state] || 0) + 1;
  const figure = (value, label) => el('span', {class: 'figure'}, el('b', {text: String(value)}), label);
  const box = document.getElementById('summary');
  box.replaceChildren(
    figure(s.hosts_up, 'hosts up'),
    figure(s.hosts_down, 'down'),
    figure(s.hosts_drained, 'drained'),
    figure(`${s.gpus_leased}/${s.gpus_leased + s.gpus_free}`, 'GPUs leased'),
    figure(`${s.cpu_slots_used}/${s.cpu_slots_total}`, 'slots used'),
    figure(gangs.forming || 0, 'forming'),
    figure(gangs.running || 0, 'running'),
    figure(gangs.failed || 0, 'failed'));
}

function renderHosts(status) {
  const {gpus, slots} = leases(status.gangs);
  const box = document.getElementById('hosts');
  if (status.hosts.length === 0) {
    box.replaceChildren(el('p', {class: 'empty', text: 'No hosts registered: start gdt-agent on a GPU host.'}));
    return;
  }
  box.replaceChildren(...status.hosts.map((host) => {
    const grid = el('div', {class: 'grid'});
    if (host.gpus_total > 0) {
      const held = gpus.get(host.name) || new Map();
      for (let i = 0; i < host.gpus_total; i++) grid.append(cell(i, held.get(i), 'GPU'));
    } else {
      const running = slots.get(host.name) || [];
      for (let i = 0; i < host.cpu_slots; i++) grid.append(cell(i, running[i], 'slot'));
    }
    const labels = Object.entries(host.labels || {}).map(([k, v]) => `${k}=${v}`).join(' ');
    return el('div', {class: 'host', 'data-host': host.name, 'data-state': host.state},
      el('div', {}, el('span', {class: 'name', text: host.name}), ' ', badge(host.state)),
      el('div', {class: 'meta', text: `${host.address || '-'} · heartbeat ${age(host.last_heartbeat_unix_ms)} ago` +
        (labels ? ` · ${labels}` : '')}),
      grid);
  }));
}

function missingMembers(gang) {
  const joined = new Set(gang.members.map((m) => m.member_index));
  const missing = [];
  for (let i = 1; i <= gang.size; i++) if (!joined.has(i)) missing.push(i);
  return missing;
}

// A running gang given its checkpoint notice to make room for another:
// `gdt-coord status` says the same (PREEMPT).
function beingPreempted(gang) {
  return gang.state === 'running' && Boolean(gang.preemption_stop_by_unix_ms);
}

function whyText(gang) {
  const parts = [];
  if (gang.state === 'forming') {
    const missing = missingMembers(gang);
    if (missing.length > 0) parts.push(`waiting for member ${missing.join(', ')} to join`);
  }
  if (gang.reason) parts.push(gang.reason);
  if (beingPreempted(gang)) {
    const left = Math.max(0, Math.ceil(
      (gang.preemption_stop_by_unix_ms - Date.now() - view.serverOffsetMs) / 1000));
    parts.push(`being preempted to make room for gang ${gang.preemption_planned_by}: ` +
               `checkpoint notice sent; stops at its next checkpoint, or in ${left} s at the latest`);
  }
  // Earlier epochs preempted (PREEMPTED in `gdt-coord status`).
  if (gang.preemptions > 0) {
    const times = gang.preemptions === 1 ? 'time' : 'times';
    const lost = Number(gang.preempted_lost_gpu_hours || 0).toFixed(2);
    parts.push(`preempted ${gang.preemptions} ${times}; last in epoch ${gang.preempted_epoch} ` +
               `by gang ${gang.preempted_by}, ~${lost} GPU-hours lost`);
  }
  return parts.join('; ') || '-';
}

function placement(gang) {
  const ranks = gang.members.filter((m) => m.node_rank >= 0)
    .sort((a, b) => a.node_rank - b.node_rank)
    .map((m) => `rank ${m.node_rank} ${m.host}` + (m.gpus.length ? ` [${m.gpus.join(',')}]` : ''));
  return ranks.join(', ') || '-';
}

function renderGangs(status) {
  const order = {forming: 0, running: 1, failed: 2, done: 3};
  const gangs = [...status.gangs].sort((a, b) =>
    (order[a.state] ?? 4) - (order[b.state] ?? 4) || b.created_unix_ms - a.created_unix_ms);
  const body = document.querySelector('#gangs tbody');
  if (gangs.length === 0) {
    body.replaceChildren(el('tr', {}, el('td', {class: 'empty', colSpan: 7, text: 'No gangs yet.'})));
    return;
  }
  body.replaceChildren(...gangs.map((gang) => {
    const present = gang.members.filter((m) => m.present && !m.left).length;
    const swatch = el('span', {class: 'swatch'});
    swatch.style.background = gangColour(gang.gang_id);
    const row = el('tr', {class: 'gang', 'data-gang-id': gang.gang_id, 'data-state': gang.state},
      el('td', {class: 'mono'}, swatch, gang.gang_id),
      el('td', {text: gang.group_name}),
      el('td', {text: `${gang.project_id}/${gang.pipeline_id}`}),
      el('td', {}, badge(gang.state), gang.epoch > 1 ? ` epoch ${gang.epoch}` : '',
        gang.nodes_min > 0 ? ` elastic ${gang.nodes_min}..${gang.size}` : ''),
      el('td', {text: `${present}/${gang.size}`}),
      el('td', {class: 'mono', text: placement(gang)}),
      el('td', {class: 'why', text: whyText(gang)}));
    if (beingPreempted(gang)) row.setAttribute('data-preempting', gang.preemption_planned_by);
    return row;
  }));
}

function renderQueue(status) {
  const waiting = status.gangs.filter((g) => g.state === 'forming')
    .sort((a, b) => a.created_unix_ms - b.created_unix_ms);
  const box = document.getElementById('queue');
  if (waiting.length === 0) {
    box.replaceChildren(el('p', {class: 'empty', text: 'Nothing waits.'}));
    return;
  }
  const now = Date.now() + view.serverOffsetMs;
  const longest = Math.max(1, ...waiting.map((g) => now - g.created_unix_ms));
  box.replaceChildren(...waiting.map((gang, position) => {
    const bar = el('div', {class: 'bar', title: `waiting ${age(gang.created_unix_ms)}`});
    bar.style.width = `${Math.max(1, 100 * (now - gang.created_unix_ms) / longest)}%`;
    bar.style.background = gangColour(gang.gang_id);
    return el('div', {class: 'row', 'data-gang-id': gang.gang_id},
      el('div', {}, el('b', {text: `${position + 1}. ${gang.group_name}`}), ' ',
        el('span', {class: 'mono', text: gang.gang_id})),
      el('div', {}, bar, el('div', {class: 'label', text: `${age(gang.created_unix_ms)} · ${whyText(gang)}`})));
  }));
}

function noteTransitions(status) {
  const now = Date.now() + view.serverOffsetMs;
  const seen = new Map();
  for (const gang of status.gangs) {
    seen.set(gang.gang_id, gang.state);
    const before = view.gangStates.get(gang.gang_id);
    if (view.polls > 0 && before !== gang.state) {
      const text = before
        ? `${gang.group_name} (${gang.gang_id}): ${before} → ${gang.state}`
        : `${gang.group_name} (${gang.gang_id}) appeared, ${gang.state}`;
      view.events.unshift({timeMs: now, text, kind: gang.state});
    }
  }
  view.gangStates = seen;
  view.events.length = Math.min(view.events.length, kMaxEvents);
}

function renderEvents(status) {
  const failures = (status.recent_failures || []).map((f) => ({
    timeMs: f.created_unix_ms, kind: 'failed',
    text: f.reason || `gang ${f.gang_id} failed`}));
  const items = [...view.events, ...failures];
  const box = document.getElementById('events');
  if (items.length === 0) {
    box.replaceChildren(el('li', {class: 'empty', text: 'No change since this page was opened, and no recent failure.'}));
    return;
  }
  box.replaceChildren(...items.map((e) => el('li', {'data-kind': e.kind},
    el('span', {class: 'time', text: new Date(e.timeMs).toLocaleTimeString()}), e.text)));
}

function showBanner(text) {
  const banner = document.getElementById('banner');
  banner.textContent = text;
  banner.hidden = !text;
}

// /api/status answers in pages (?limit=, ?page_token=), each with its own
// summary: read them all (at most kMaxPages) and add them up into one.
const kMaxPages = 100;
const kRecentFailures = 5;

async function fetchStatus(headers) {
  let first = null;
  let token = '';
  for (let page = 0; page < kMaxPages; page++) {
    const url = token ? `/api/status?page_token=${encodeURIComponent(token)}`
                      : '/api/status';
    const response = await fetch(url, {headers, cache: 'no-store'});
    const body = await response.json();
    if (!response.ok) return {response, body};
    if (first === null) {
      first = {response, body};
    } else {
      const all = first.body;
      all.hosts.push(...body.hosts);
      all.gangs.push(...body.gangs);
      all.recent_failures.push(...body.recent_failures);
      for (const key of Object.keys(all.summary)) {
        all.summary[key] += body.summary[key] || 0;
      }
    }
    token = body.next_page_token || '';
    if (!token) break;
  }
  first.body.recent_failures.sort((a, b) => b.created_unix_ms - a.created_unix_ms);
  first.body.recent_failures.splice(kRecentFailures);
  return first;
}

async function poll() {
  try {
    const headers = view.token ? {Authorization: `Bearer ${view.token}`} : {};
    const {response, body} = await fetchStatus(headers);
    if (!response.ok) {
      showBanner(body.error || `the coordinator answered ${response.status}`);
      document.body.dataset.state = 'error';
    } else {
      const serverDate = Date.parse(response.headers.get('Date') || '');
      if (!Number.isNaN(serverDate)) view.serverOffsetMs = serverDate - Date.now();
      showBanner('');
      noteTransitions(body);
      renderSummary(body);
      renderHosts(body);
      renderQueue(body);
      renderGangs(body);
      renderEvents(body);
      view.polls++;
      document.getElementById('updated').textContent =
        `updated ${new Date().toLocaleTimeString()}`;
      document.body.dataset.state = 'live';
    }
  } catch (error) {
    showBanner(`cannot reach the coordinator's dashboard: ${error.message}`);
    document.body.dataset.state = 'error';
  }
  setTimeout(poll, kPollMs);
}

if (readToken()) {
  poll();
} else {
  showBanner('reading the dashboard refused: the token in the address is ' +
             'malformed (open the page as /#token=<admin token>, %-encoded)');
  document.body.dataset.state = 'error';
}
