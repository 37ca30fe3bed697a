// Lua scripts are bundled as text (tsup's text loader, and a plugin in vitest.config.ts).
declare module '*.lua' {
  const source: string;
  export default source;
}
