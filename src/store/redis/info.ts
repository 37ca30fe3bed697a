/** Fields of an INFO reply, for both client libraries. */

export function infoField(info: string, field: string): string | undefined {
  const match = new RegExp(`^${field}:(.*)$`, 'm').exec(info);
  return match?.[1]?.trim();
}

export function majorFromInfo(info: string): number {
  const match = /redis_version:(\d+)/.exec(info);
  return match?.[1] ? Number(match[1]) : 0;
}
