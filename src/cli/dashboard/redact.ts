/**
 * What the page may learn about the backend's connection: its kind and where it is, never the
 * credentials. The connection URL can carry a user, a password and secret query parameters
 * (`?password=`, `sslpassword`), and error messages may quote the URL, so every text sent to a
 * page passes through `redact`.
 */
export interface Redactor {
  /** `redis 127.0.0.1:6379`, `postgres db.local:5432/app`, `etcd 10.0.0.1:2379, 10.0.0.2:2379`. */
  readonly label: string;
  /** `text` with every credential of the connection URL replaced by `***`. */
  redact(text: string): string;
}

/** Query parameters whose values are treated as secrets. */
const SECRET_PARAM = /pass|secret|token|key|auth|user|cert/i;

function parse(text: string): URL | undefined {
  try {
    return new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `http://${text}`);
  } catch {
    return undefined;
  }
}

/** The host, port and (for PostgreSQL) database of one URL, with nothing else. */
function where(url: URL | undefined, withPath: boolean): string {
  if (!url) return 'an unparsable address';
  const path = withPath && url.pathname.length > 1 ? url.pathname : '';
  return `${url.host}${path}`;
}

export function redactor(kind: 'redis' | 'postgres' | 'etcd', connection: string): Redactor {
  const parts = kind === 'etcd' ? connection.split(',') : [connection];
  const urls = parts.map((p) => parse(p.trim()));
  const secrets = new Set<string>();
  // The whole URL and each endpoint first, so no piece of one survives a partial replacement.
  secrets.add(connection);
  for (const [i, url] of urls.entries()) {
    const raw = parts[i]?.trim();
    if (raw && (url?.username || url?.password || url?.search)) secrets.add(raw);
    if (!url) continue;
    for (const value of [url.password, url.username]) {
      if (value === '') continue;
      secrets.add(value);
      secrets.add(safeDecode(value));
    }
    for (const [key, value] of url.searchParams) {
      if (SECRET_PARAM.test(key) && value !== '') {
        secrets.add(value);
        secrets.add(encodeURIComponent(value));
      }
    }
  }
  const label = `${kind} ${urls.map((u) => where(u, kind === 'postgres')).join(', ')}`;
  // Longest first: a password that contains the user name is replaced whole.
  const ordered = [...secrets].filter((s) => s.length > 0).sort((a, b) => b.length - a.length);
  return {
    label,
    redact(text) {
      let out = text;
      for (const secret of ordered) {
        if (secret === connection || parts.includes(secret)) out = out.split(secret).join(label);
        else out = out.split(secret).join('***');
      }
      return out;
    },
  };
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}
