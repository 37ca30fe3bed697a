/**
 * The dashboard's one page. Static: everything that varies arrives over the event stream, so the
 * page holds no data and no secret; its script and styles are served beside it (/app.js, /app.css).
 */
export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>leasehold dashboard</title>
<link rel="stylesheet" href="/app.css">
<script src="/app.js" defer></script>
</head>
<body>
<a class="skip" href="#locks-h">Skip to the held locks</a>
<header class="top">
  <div class="brand">
    <h1>leasehold <span class="sub">dashboard</span></h1>
    <p class="where"><span id="backend">connecting…</span> · prefix <code id="prefix">…</code></p>
  </div>
  <p id="conn" class="conn conn-wait"><span class="dot" aria-hidden="true"></span><span id="conn-text">Connecting…</span></p>
</header>
<main>
  <section class="summary" aria-label="Summary">
    <div class="card"><span class="num" id="n-held">–</span><span class="lbl">locks held</span></div>
    <div class="card"><span class="num" id="n-waiting">–</span><span class="lbl" id="n-waiting-lbl">waiters queued</span></div>
    <div class="card"><span class="num" id="n-jobs">–</span><span class="lbl">scheduled jobs</span></div>
    <div class="card"><span class="num" id="n-mode">–</span><span class="lbl" id="n-mode-lbl">force release</span></div>
  </section>

  <div class="filter">
    <label for="filter">Filter by name</label>
    <input id="filter" type="search" autocomplete="off" spellcheck="false" aria-describedby="filter-hint">
    <span id="filter-hint" class="hint">Part of a lock or job name, any case; filters every panel.</span>
  </div>

  <section class="panel" aria-labelledby="locks-h">
    <div class="panel-head">
      <h2 id="locks-h" tabindex="-1">Held locks</h2>
      <p id="locks-count" class="muted"></p>
    </div>
    <div class="table-wrap">
      <table id="locks-table">
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Mode</th>
            <th scope="col">Holder instance</th>
            <th scope="col">Since</th>
            <th scope="col" class="num-col">Time left</th>
            <th scope="col" class="num-col">Fencing token</th>
            <th scope="col" class="num-col">Waiters</th>
            <th scope="col" id="action-col" hidden><span class="sr-only">Action</span></th>
          </tr>
        </thead>
        <tbody id="locks-body"></tbody>
      </table>
    </div>
    <p id="locks-empty" class="empty" hidden>No locks held.</p>
    <nav class="pager" aria-label="Pages of held locks">
      <button id="prev" type="button">← Previous</button>
      <span id="page-info"></span>
      <button id="next" type="button">Next →</button>
      <label for="size">Rows per page</label>
      <select id="size"><option value="25">25</option><option value="50" selected>50</option><option value="100">100</option></select>
    </nav>
  </section>

  <div class="columns">
    <section class="panel" aria-labelledby="waiters-h">
      <div class="panel-head"><h2 id="waiters-h">Waiters</h2><p id="waiters-count" class="muted"></p></div>
      <div id="waiters-list"></div>
    </section>
    <section class="panel" aria-labelledby="jobs-h">
      <div class="panel-head"><h2 id="jobs-h">Scheduled jobs</h2><p id="jobs-count" class="muted"></p></div>
      <div id="jobs-list"></div>
    </section>
  </div>

  <section class="panel" aria-labelledby="timeline-h">
    <div class="panel-head"><h2 id="timeline-h">Grants lately</h2><p id="timeline-count" class="muted"></p></div>
    <div id="timeline"></div>
    <ul id="legend" class="legend" aria-label="Instances"></ul>
  </section>
  <p id="announce" class="sr-only" role="status" aria-live="polite"></p>
</main>

<dialog id="release-dialog" aria-labelledby="rd-title" aria-describedby="rd-warning">
  <form id="release-form" method="dialog">
    <h2 id="rd-title">Force-release <span id="rd-name"></span>?</h2>
    <p id="rd-detail"></p>
    <p id="rd-warning" class="warning">This breaks mutual exclusion: the holder is not stopped, it keeps working until its
    next extension fails, and only resources that check fencing tokens refuse its writes. The first waiter gets the lock.</p>
    <label for="rd-token">Release token <span class="hint">(printed when the dashboard started)</span></label>
    <input id="rd-token" type="password" autocomplete="off" spellcheck="false" required>
    <p id="rd-error" class="error" role="alert"></p>
    <div class="actions">
      <button type="button" id="rd-cancel">Cancel</button>
      <button type="submit" id="rd-confirm" class="danger">Force release</button>
    </div>
  </form>
</dialog>
</body>
</html>
`;
