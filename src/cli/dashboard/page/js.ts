/**
 * The page's script: no framework, no build step. It opens one event stream for its view (filter,
 * page of the table) and redraws from each snapshot the server sends; changing the view reopens
 * the stream. Rows are kept by lock name and updated in place, so a focused button stays focused.
 * Written as plain JavaScript in a string (no template literal, backslash or dollar-brace inside it).
 */
export const APP_JS = `(function () {
  'use strict';
  var $ = function (id) { return document.getElementById(id); };
  var view = { filter: '', offset: 0, size: 50 };
  var data = null;
  var skew = 0;          // server clock minus this page's clock, ms
  var receivedAt = 0;    // this page's clock at the last snapshot
  var source = null;
  var stopped = false;
  var token = '';
  var rows = new Map();  // lock name -> tr
  var reopenTimer = 0;
  var releasing = null;  // the row the dialog confirms

  // A release token handed over in the address's fragment (never sent to the server) is taken and hidden.
  var fragment = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (fragment) {
    token = decodeURIComponent(fragment[1]);
    history.replaceState(null, '', location.pathname + location.search);
  }

  // A filter in the address (?filter=orders) is the page's filter, so a filtered view can be shared.
  var initial = new URLSearchParams(location.search).get('filter');
  if (initial) { view.filter = initial; $('filter').value = initial; }

  function now() { return Date.now() + skew; }
  function text(el, value) { if (el.textContent !== value) el.textContent = value; }
  function el(tag, cls, content) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (content !== undefined && content !== null) e.textContent = content;
    return e;
  }
  function fmtInt(n) { return Number(n).toLocaleString('en-US'); }
  function pad(n, w) { var s = String(n); while (s.length < (w || 2)) s = '0' + s; return s; }
  function clock(ms) { var d = new Date(ms); return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()); }
  function span(ms) {
    if (ms < 0) ms = 0;
    if (ms < 10000) return (ms / 1000).toFixed(1) + ' s';
    var s = Math.round(ms / 1000);
    if (s < 60) return s + ' s';
    var m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + pad(s % 60) + ' s';
    var h = Math.floor(m / 60);
    if (h < 48) return h + ' h ' + pad(m % 60) + ' min';
    return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
  }
  function left(expiresAt) {
    if (expiresAt === null) return 'no expiry';
    var ms = expiresAt - now();
    return ms <= 0 ? 'ending…' : span(ms);
  }
  function since(ms) { return ms === null ? '–' : clock(ms) + ' (' + span(now() - ms) + ' ago)'; }
  function announce(message) { text($('announce'), ''); setTimeout(function () { text($('announce'), message); }, 50); }

  // ---- the stream ----
  function open() {
    if (stopped) return;
    if (source) source.close();
    var q = '?filter=' + encodeURIComponent(view.filter) + '&offset=' + view.offset + '&size=' + view.size;
    source = new EventSource('/events' + q);
    source.addEventListener('snapshot', function (e) { onSnapshot(JSON.parse(e.data)); });
    source.addEventListener('bye', function (e) {
      stopped = true;
      source.close();
      var reason = JSON.parse(e.data).reason;
      setConn('bad', 'Stopped: ' + reason);
      announce('The dashboard stopped: ' + reason);
    });
    source.onerror = function () { if (!stopped) setConn('wait', 'Reconnecting…'); };
  }
  function reopen(delay) {
    clearTimeout(reopenTimer);
    reopenTimer = setTimeout(open, delay);
  }
  function setConn(kind, message) {
    var c = $('conn');
    var cls = 'conn conn-' + kind;
    if (c.className !== cls) c.className = cls;
    text($('conn-text'), message);
  }

  function onSnapshot(snap) {
    data = snap;
    receivedAt = Date.now();
    skew = snap.now - receivedAt;
    if (snap.locks.offset !== view.offset) view.offset = snap.locks.offset;
    render();
  }

  // ---- rendering ----
  function render() {
    if (!data) return;
    var meta = data.meta;
    text($('backend'), meta.backend);
    text($('prefix'), meta.prefix);
    document.title = 'leasehold · ' + fmtInt(data.totals.held) + ' held · ' + meta.prefix;
    renderStatus();
    renderSummary();
    renderLocks();
    renderWaiters();
    renderJobs();
    renderTimeline();
  }

  function renderStatus() {
    var st = data.status;
    if (st.error) setConn('bad', 'Backend error: ' + st.error);
    else if (st.at === 0) setConn('wait', 'Reading…');
    else setConn('live', 'Live · updated ' + clock(st.at));
  }
  function staleCheck() {
    if (!data || stopped || data.status.error) return;
    var age = now() - data.status.at;
    if (data.status.at > 0 && age > 3 * data.meta.interval + 2000) setConn('wait', 'Stale: last update ' + span(age) + ' ago');
  }

  function renderSummary() {
    var t = data.totals;
    text($('n-held'), fmtInt(t.held));
    text($('n-waiting'), fmtInt(t.waiting));
    text($('n-waiting-lbl'), t.waiting === 0 ? 'waiters queued' : 'waiters queued on ' + fmtInt(t.queuedLocks) + (t.queuedLocks === 1 ? ' lock' : ' locks'));
    $('n-waiting').parentNode.className = t.waiting > 0 ? 'card attention' : 'card';
    text($('n-jobs'), fmtInt(t.jobs));
    text($('n-mode'), data.meta.allowRelease ? 'Enabled' : 'Read-only');
    text($('n-mode-lbl'), data.meta.allowRelease ? 'force release, with the token' : 'force release is off');
    $('n-mode').parentNode.className = data.meta.allowRelease ? 'card alert' : 'card';
  }

  function modeOf(r) {
    if (r.mode === 'semaphore') return 'semaphore ' + r.holders + '/' + (r.limit === null ? '?' : r.limit);
    if (r.mode === 'shared') return 'shared ×' + r.holders;
    return r.mode;
  }

  function makeRow(name) {
    var tr = el('tr');
    tr.dataset.name = name;
    var cells = ['name', 'mode', 'instance', 'since', 'left num', 'fence num', 'waiters num'];
    for (var i = 0; i < cells.length; i++) tr.appendChild(el('td', cells[i]));
    if (data.meta.allowRelease) {
      var td = el('td', 'action');
      var b = el('button', 'release', 'Release…');
      b.type = 'button';
      b.setAttribute('aria-label', 'Force-release ' + name);
      b.addEventListener('click', function () { openRelease(name, b); });
      td.appendChild(b);
      tr.appendChild(td);
    }
    return tr;
  }

  function fillRow(tr, r) {
    var c = tr.children;
    text(c[0], r.name);
    tr.className = r.unread ? 'unread' : '';
    if (r.unread) {
      text(c[1], 'reading…'); text(c[2], ''); text(c[3], ''); text(c[4], ''); text(c[5], ''); text(c[6], '');
      tr.dataset.expires = '';
      tr.dataset.taken = '';
      return;
    }
    text(c[1], modeOf(r));
    var inst = c[2];
    var label = (r.instance === null ? 'not recorded' : r.instance);
    if (inst.firstChild === null || inst.firstChild.textContent !== label || (inst.childNodes[1] ? inst.childNodes[1].textContent : '') !== (r.owner || '')) {
      inst.textContent = '';
      inst.appendChild(document.createTextNode(label));
      if (r.owner) inst.appendChild(el('code', 'owner', r.owner));
    }
    tr.dataset.expires = r.expiresAt === null ? 'none' : String(r.expiresAt);
    tr.dataset.taken = r.takenAt === null ? '' : String(r.takenAt);
    tr.dataset.fence = String(r.fence);
    tr.dataset.instance = r.instance || '';
    text(c[3], since(r.takenAt));
    text(c[4], left(r.expiresAt));
    c[4].className = 'left num' + (r.expiresAt !== null && r.expiresAt - now() < 2000 ? ' low' : '');
    text(c[5], String(r.fence));
    text(c[6], r.waiters === 0 ? '0' : fmtInt(r.waiters));
  }

  function renderLocks() {
    if (data.meta.allowRelease) $('action-col').hidden = false;
    var locks = data.locks;
    var body = $('locks-body');
    var wanted = new Set();
    for (var i = 0; i < locks.rows.length; i++) {
      var r = locks.rows[i];
      wanted.add(r.name);
      var tr = rows.get(r.name);
      if (!tr) { tr = makeRow(r.name); rows.set(r.name, tr); }
      fillRow(tr, r);
      // Only a row out of place moves: moving a row would take the focus from its button.
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
    }
    rows.forEach(function (tr, name) {
      if (!wanted.has(name)) { tr.remove(); rows.delete(name); }
    });
    $('locks-empty').hidden = locks.rows.length > 0;
    text($('locks-empty'), view.filter ? 'No held lock matches “' + view.filter + '”.' : 'No locks held.');
    var from = locks.total === 0 ? 0 : locks.offset + 1;
    var to = locks.offset + locks.rows.length;
    text($('page-info'), fmtInt(from) + '–' + fmtInt(to) + ' of ' + fmtInt(locks.total));
    $('prev').disabled = locks.offset === 0;
    $('next').disabled = to >= locks.total;
    var parts = [fmtInt(locks.total) + (view.filter ? ' matching' : ' held')];
    if (data.totals.unread > 0) parts.push(fmtInt(data.totals.unread) + ' not read yet');
    parts.push('refreshed every ' + (data.meta.interval / 1000) + ' s');
    text($('locks-count'), parts.join(' · '));
  }

  function renderWaiters() {
    var w = data.waiters;
    var list = $('waiters-list');
    list.textContent = '';
    text($('waiters-count'), w.total === 0 ? '' : fmtInt(w.total) + (w.total === 1 ? ' lock' : ' locks') + ' with waiters');
    if (w.locks.length === 0) { list.appendChild(el('p', 'empty', 'Nobody is waiting.')); return; }
    for (var i = 0; i < w.locks.length; i++) {
      var lock = w.locks[i];
      var box = el('div', 'wlock');
      var h = el('h3');
      h.appendChild(el('span', null, lock.name));
      h.appendChild(el('span', 'count', fmtInt(lock.count) + ' waiting'));
      box.appendChild(h);
      var ol = el('ol');
      for (var j = 0; j < lock.first.length; j++) {
        var wt = lock.first[j];
        var li = el('li');
        li.appendChild(el('code', null, wt.id));
        var s = el('span', 'wait');
        s.dataset.since = String(wt.since);
        s.dataset.atleast = wt.atLeast ? '1' : '';
        s.textContent = waited(s);
        li.appendChild(s);
        ol.appendChild(li);
      }
      box.appendChild(ol);
      if (lock.count > lock.first.length) box.appendChild(el('p', 'muted', 'and ' + fmtInt(lock.count - lock.first.length) + ' more'));
      list.appendChild(box);
    }
    if (w.total > w.locks.length) list.appendChild(el('p', 'muted', fmtInt(w.total - w.locks.length) + ' more locks with waiters (filter to see them)'));
  }
  function waited(s) { return 'waited ' + (s.dataset.atleast ? '≥ ' : '') + span(now() - Number(s.dataset.since)); }

  function renderJobs() {
    var j = data.jobs;
    var list = $('jobs-list');
    list.textContent = '';
    text($('jobs-count'), j.total === 0 ? '' : fmtInt(j.total) + (j.total === 1 ? ' job' : ' jobs'));
    if (j.list.length === 0) {
      list.appendChild(el('p', 'empty', 'No scheduled job seen yet. Jobs show up once one is seen running, or name them with --jobs.'));
      return;
    }
    for (var i = 0; i < j.list.length; i++) {
      var job = j.list[i];
      var box = el('article', 'job');
      var h = el('h3');
      h.appendChild(el('span', null, job.name));
      var state = job.held ? 'running now' : 'idle';
      if (job.lastTick !== null) state += ' · last tick ' + clock(job.lastTick);
      h.appendChild(el('span', 'state', state));
      box.appendChild(h);
      if (job.runs.length === 0) { box.appendChild(el('p', 'muted', 'No runs recorded.')); list.appendChild(box); continue; }
      var t = el('table');
      var cap = el('caption', 'sr-only', 'Recent runs of ' + job.name);
      t.appendChild(cap);
      var head = el('tr');
      ['Tick', 'Instance', 'Started', 'Duration', 'Outcome'].forEach(function (label) {
        var th = el('th', label === 'Duration' ? 'num-col' : null, label);
        th.scope = 'col';
        head.appendChild(th);
      });
      var thead = el('thead'); thead.appendChild(head); t.appendChild(thead);
      var tb = el('tbody');
      for (var k = 0; k < job.runs.length; k++) {
        var run = job.runs[k];
        var tr = el('tr');
        tr.appendChild(el('td', null, run.tick === null ? '–' : clock(run.tick)));
        tr.appendChild(el('td', null, run.instance));
        tr.appendChild(el('td', null, clock(run.startedAt)));
        tr.appendChild(el('td', 'num', run.duration === null ? '–' : fmtInt(run.duration) + ' ms'));
        var out = el('td');
        var badge = el('span', 'badge b-' + run.outcome, run.outcome);
        out.appendChild(badge);
        if (run.error) { var e = el('span', 'muted', ' ' + run.error); out.appendChild(e); }
        tr.appendChild(out);
        tb.appendChild(tr);
      }
      t.appendChild(tb);
      box.appendChild(t);
      list.appendChild(box);
    }
    if (j.total > j.list.length) list.appendChild(el('p', 'muted', fmtInt(j.total - j.list.length) + ' more jobs (filter to see them)'));
  }

  // Colours for instances on the timeline, each at least 3:1 against the track.
  var PALETTE = ['#0969da', '#1a7f37', '#8250df', '#bf3989', '#bc4c00', '#0a7480', '#9a6700', '#57606a'];
  var colours = new Map();
  function colourOf(instance) {
    if (!colours.has(instance)) colours.set(instance, PALETTE[colours.size % PALETTE.length]);
    return colours.get(instance);
  }

  function renderTimeline() {
    var tl = data.timeline;
    var minutes = Math.round((tl.to - tl.from) / 60000);
    var period = 'in the last ' + (minutes === 1 ? 'minute' : minutes + ' minutes');
    text($('timeline-h'), 'Grants ' + period);
    var box = $('timeline');
    box.textContent = '';
    var legend = $('legend');
    legend.textContent = '';
    text($('timeline-count'), tl.lanes.length === 0 ? '' : 'the ' + tl.lanes.length + ' locks granted most recently; one bar per grant, coloured by instance');
    if (tl.lanes.length === 0) { box.appendChild(el('p', 'empty', 'No grants seen lately.')); return; }
    var width = tl.to - tl.from;
    var grid = el('div', 'lanes');
    var instances = new Set();
    for (var i = 0; i < tl.lanes.length; i++) {
      var lane = tl.lanes[i];
      var name = el('div', 'lane-name');
      name.appendChild(document.createTextNode(lane.name + ' '));
      name.appendChild(el('span', 'count', '(' + lane.count + ')'));
      name.title = lane.name;
      grid.appendChild(name);
      var track = el('div', 'track');
      track.setAttribute('role', 'img');
      var last = lane.grants[lane.grants.length - 1];
      track.setAttribute('aria-label', lane.name + ': ' + lane.count + (lane.count === 1 ? ' grant' : ' grants') + ' ' + period + '; the latest, fencing token ' + last.fence + ' by ' + last.instance + (last.end === null ? ', still held' : ''));
      for (var g = 0; g < lane.grants.length; g++) {
        var gr = lane.grants[g];
        var start = Math.max(gr.start, tl.from);
        var end = gr.end === null ? tl.to : Math.min(gr.end, tl.to);
        var bar = el('span', 'grant' + (gr.end === null ? ' open' : ''));
        bar.style.left = ((start - tl.from) / width * 100).toFixed(3) + '%';
        bar.style.width = (Math.max(end - start, 0) / width * 100).toFixed(3) + '%';
        bar.style.background = colourOf(gr.instance);
        bar.title = 'token ' + gr.fence + ' · ' + gr.instance + ' · ' + clock(gr.start) + (gr.end === null ? ' – still held' : ' – ' + clock(gr.end));
        instances.add(gr.instance);
        track.appendChild(bar);
      }
      grid.appendChild(track);
    }
    grid.appendChild(el('div'));
    var axis = el('div', 'axis');
    axis.setAttribute('aria-hidden', 'true');
    // A tick a minute, or every 30 s on a short strip.
    var step = minutes <= 2 ? 30 : 60;
    for (var sec = minutes * 60; sec >= 0; sec -= step) {
      var label = sec === 0 ? 'now' : step === 30 ? '−' + sec + ' s' : '−' + (sec / 60) + ' min';
      var tick = el('span', null, label);
      tick.style.left = ((minutes * 60 - sec) / (minutes * 60) * 100) + '%';
      axis.appendChild(tick);
    }
    grid.appendChild(axis);
    box.appendChild(grid);
    instances.forEach(function (instance) {
      var li = el('li');
      var sw = el('span', 'swatch');
      sw.style.background = colourOf(instance);
      li.appendChild(sw);
      li.appendChild(el('span', null, instance));
      legend.appendChild(li);
    });
  }

  // Between snapshots the clocks keep running: times left, ages, waits.
  function tick() {
    staleCheck();
    rows.forEach(function (tr) {
      if (tr.className === 'unread') return;
      var c = tr.children;
      var exp = tr.dataset.expires;
      var e = exp === 'none' ? null : Number(exp);
      text(c[4], left(e));
      c[4].className = 'left num' + (e !== null && e - now() < 2000 ? ' low' : '');
      text(c[3], since(tr.dataset.taken ? Number(tr.dataset.taken) : null));
    });
    var waits = document.querySelectorAll('.wlock .wait');
    for (var i = 0; i < waits.length; i++) text(waits[i], waited(waits[i]));
  }

  // ---- the release dialog ----
  function openRelease(name, button) {
    var tr = rows.get(name);
    if (!tr) return;
    releasing = { name: name, fence: Number(tr.dataset.fence), button: button };
    text($('rd-name'), '“' + name + '”');
    text($('rd-detail'), 'Held by ' + (tr.dataset.instance || 'an unrecorded instance') + ', fencing token ' + tr.dataset.fence + '.');
    text($('rd-error'), '');
    $('rd-token').value = token;
    $('release-dialog').showModal();
    (token ? $('rd-confirm') : $('rd-token')).focus();
  }
  function closeRelease() {
    var d = $('release-dialog');
    if (d.open) d.close();
  }
  $('release-dialog').addEventListener('close', function () {
    if (releasing && releasing.button && document.contains(releasing.button)) releasing.button.focus();
    releasing = null;
  });
  $('rd-cancel').addEventListener('click', closeRelease);
  $('release-form').addEventListener('submit', function (e) {
    e.preventDefault();
    if (!releasing) return;
    var target = releasing;
    var sent = $('rd-token').value.trim();
    $('rd-confirm').disabled = true;
    text($('rd-error'), '');
    fetch('/api/release', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      credentials: 'same-origin',
      body: JSON.stringify({ name: target.name, fence: target.fence, token: sent })
    }).then(function (res) {
      return res.json().then(function (body) { return { ok: res.ok, body: body }; });
    }).then(function (r) {
      $('rd-confirm').disabled = false;
      if (!r.ok) { text($('rd-error'), r.body.error || 'refused'); return; }
      token = sent;
      closeRelease();
      announce('Released ' + target.name + (r.body.instance ? ', held by ' + r.body.instance : '') + (r.body.handedOn ? '; handed to the first waiter' : ''));
    }, function (err) {
      $('rd-confirm').disabled = false;
      text($('rd-error'), 'The request failed: ' + err.message);
    });
  });

  // ---- controls ----
  $('filter').addEventListener('input', function () {
    view.filter = $('filter').value;
    view.offset = 0;
    history.replaceState(null, '', view.filter ? '?filter=' + encodeURIComponent(view.filter) : location.pathname);
    reopen(200);
  });
  $('prev').addEventListener('click', function () {
    view.offset = Math.max(0, view.offset - view.size);
    reopen(0);
  });
  $('next').addEventListener('click', function () {
    view.offset = view.offset + view.size;
    reopen(0);
  });
  $('size').addEventListener('change', function () {
    view.size = Number($('size').value);
    view.offset = 0;
    reopen(0);
  });

  open();
  setInterval(tick, 250);
})();
`;
