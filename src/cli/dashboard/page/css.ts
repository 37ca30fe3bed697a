/**
 * The page's styles. Every text colour is at least 4.5:1 against the background it sits on (the
 * dashboard test measures it in the browser); state is told by words as well as colour.
 */
export const APP_CSS = `
:root {
  --text: #1f2328; --muted: #57606a; --page: #f6f8fa; --panel: #ffffff; --line: #d0d7de;
  --accent: #0969da; --ok-fg: #116329; --ok-bg: #dafbe1; --warn-fg: #7d4e00; --warn-bg: #fff8c5;
  --bad-fg: #a40e26; --bad-bg: #ffebe9; --info-fg: #0550ae; --info-bg: #ddf4ff; --idle-fg: #424a53; --idle-bg: #eaeef2;
  color-scheme: light;
}
* { box-sizing: border-box; }
html { font-size: 15px; }
body {
  margin: 0; background: var(--page); color: var(--text);
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "Liberation Sans", Arial, sans-serif;
  line-height: 1.45;
}
code, .mono, td.num { font-family: ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.93em; }
.num-col, td.num { text-align: right; font-variant-numeric: tabular-nums; }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; border-radius: 3px; }
.sr-only { position: absolute; width: 1px; height: 1px; padding: 0; margin: -1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; border: 0; }
.skip { position: absolute; left: 8px; top: -40px; background: var(--panel); color: var(--accent); padding: 6px 10px; z-index: 10; }
.skip:focus { top: 8px; }

.top {
  display: flex; align-items: center; justify-content: space-between; gap: 16px; flex-wrap: wrap;
  padding: 12px 24px; background: var(--panel); border-bottom: 1px solid var(--line);
}
.top h1 { margin: 0; font-size: 1.35rem; letter-spacing: -0.01em; }
.top h1 .sub { font-weight: 400; color: var(--muted); }
.where { margin: 2px 0 0; color: var(--muted); }
.where code { color: var(--text); }
.conn { margin: 0; display: inline-flex; align-items: center; gap: 8px; padding: 4px 12px; border-radius: 999px; font-weight: 600; }
.conn .dot { width: 10px; height: 10px; border-radius: 50%; background: currentColor; }
.conn-live { color: var(--ok-fg); background: var(--ok-bg); }
.conn-wait { color: var(--warn-fg); background: var(--warn-bg); }
.conn-bad { color: var(--bad-fg); background: var(--bad-bg); }

main { padding: 16px 24px 32px; max-width: 1600px; margin: 0 auto; }
.summary { display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 12px; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; display: flex; flex-direction: column; }
.card .num { font-size: 1.7rem; font-weight: 650; font-variant-numeric: tabular-nums; line-height: 1.2; }
.card .lbl { color: var(--muted); }
.card.alert .num { color: var(--bad-fg); }
.card.attention .num { color: var(--warn-fg); }

.filter { display: flex; align-items: center; gap: 10px; flex-wrap: wrap; margin: 16px 0 12px; }
.filter label { font-weight: 600; }
input, select, button { font: inherit; color: var(--text); }
input[type=search], input[type=password] {
  padding: 6px 10px; border: 1px solid #8c959f; border-radius: 6px; background: var(--panel); min-width: 260px;
}
.hint { color: var(--muted); font-weight: 400; }

.panel { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; margin-bottom: 16px; }
.panel-head { display: flex; align-items: baseline; justify-content: space-between; gap: 12px; flex-wrap: wrap; }
.panel h2 { font-size: 1.1rem; margin: 0 0 8px; }
.muted { color: var(--muted); margin: 0; }
.columns { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1.4fr); gap: 16px; }
.columns .panel { margin-bottom: 16px; }

.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 5px 10px; border-bottom: 1px solid #eaeef2; text-align: left; vertical-align: top; white-space: nowrap; }
th { font-size: 0.87rem; color: var(--muted); font-weight: 600; border-bottom: 1px solid var(--line); }
tbody tr:hover { background: #f6f8fa; }
td.name { font-weight: 600; white-space: normal; word-break: break-all; max-width: 28rem; }
td .owner { color: var(--muted); margin-left: 6px; }
td.low { color: var(--bad-fg); font-weight: 600; }
.unread td { color: var(--muted); }
.empty { color: var(--muted); margin: 8px 0; }

.pager { display: flex; align-items: center; gap: 10px; margin-top: 10px; flex-wrap: wrap; }
.pager label { margin-left: auto; color: var(--muted); }
button {
  padding: 5px 12px; border: 1px solid #8c959f; border-radius: 6px; background: #f6f8fa; cursor: pointer;
}
button:hover:not(:disabled) { background: #eaeef2; }
button:disabled { color: var(--muted); background: var(--panel); cursor: default; border-color: #d0d7de; }
button.danger { background: #cf222e; border-color: #a40e26; color: #ffffff; font-weight: 600; }
button.danger:hover { background: #a40e26; }
button.release { padding: 2px 10px; font-size: 0.9rem; color: var(--bad-fg); border-color: #cf222e; background: var(--panel); }
button.release:hover { background: var(--bad-bg); }
select { padding: 4px 6px; border: 1px solid #8c959f; border-radius: 6px; background: var(--panel); }

.badge { display: inline-block; padding: 0 8px; border-radius: 999px; font-size: 0.85rem; font-weight: 600; }
.b-ok, .b-done { color: var(--ok-fg); background: var(--ok-bg); }
.b-failed { color: var(--bad-fg); background: var(--bad-bg); }
.b-running { color: var(--info-fg); background: var(--info-bg); }
.b-lost, .b-abandoned { color: var(--warn-fg); background: var(--warn-bg); }
.b-idle { color: var(--idle-fg); background: var(--idle-bg); }

.wlock { margin: 0 0 10px; }
.wlock h3, .job h3 { font-size: 1rem; margin: 0; display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; }
.wlock h3 .count { color: var(--warn-fg); }
.wlock ol { margin: 4px 0 0; padding-left: 1.6em; }
.wlock li { color: var(--text); }
.wlock li .wait { color: var(--muted); margin-left: 6px; }
.job { border-top: 1px solid #eaeef2; padding-top: 8px; margin-top: 8px; }
.job:first-child { border-top: 0; margin-top: 0; padding-top: 0; }
.job .state { color: var(--muted); font-weight: 400; font-size: 0.93rem; }
.job table { margin-top: 4px; }

.lanes { display: grid; grid-template-columns: minmax(8rem, 16rem) minmax(0, 1fr); gap: 4px 12px; align-items: center; }
.lane-name { font-weight: 600; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.lane-name .count { color: var(--muted); font-weight: 400; }
.track { position: relative; height: 20px; background: #eef1f4; border-radius: 4px; overflow: hidden; }
.grant { position: absolute; top: 2px; bottom: 2px; min-width: 3px; border-radius: 2px; }
.grant.open { box-shadow: inset -3px 0 0 #1f2328; }
.axis { position: relative; height: 1.3em; color: var(--muted); font-size: 0.85rem; }
.axis span { position: absolute; transform: translateX(-50%); white-space: nowrap; }
.axis span:first-child { transform: none; }
.axis span:last-child { transform: translateX(-100%); }
.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 6px 16px; padding: 0; margin: 10px 0 0; }
.legend li { display: inline-flex; align-items: center; gap: 6px; }
.swatch { width: 12px; height: 12px; border-radius: 2px; display: inline-block; }

dialog { border: 1px solid var(--line); border-radius: 10px; padding: 20px 24px; max-width: 34rem; color: var(--text); }
dialog::backdrop { background: rgba(31, 35, 40, 0.45); }
dialog h2 { margin-top: 0; font-size: 1.15rem; word-break: break-all; }
dialog label { display: block; font-weight: 600; margin-bottom: 4px; }
dialog input { width: 100%; }
.warning { background: var(--warn-bg); color: var(--warn-fg); padding: 8px 12px; border-radius: 6px; }
.error { color: var(--bad-fg); min-height: 1.4em; margin: 6px 0; font-weight: 600; }
.actions { display: flex; justify-content: flex-end; gap: 10px; }

@media (max-width: 900px) {
  .summary { grid-template-columns: repeat(2, minmax(0, 1fr)); }
  .columns { grid-template-columns: minmax(0, 1fr); }
  main { padding: 12px; }
}
`;
