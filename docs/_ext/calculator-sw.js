// The calculator's service worker (docs/_ext/trainmath_calculator.py copies it to the site's
// root, with the build's version below; a page registers it only when the reader asks to keep
// the calculator offline). Network first, so a rebuilt site is seen at once; every answer is
// kept in this build's cache, so the page, Pyodide and the trainmath wheel still load when the
// network is gone. A new build's worker deletes the caches of the builds before it.
const VERSION = "__BUILD__";
const PREFIX = "trainmath-calculator-";
const CACHE = PREFIX + VERSION;

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil((async () => {
  for (const key of await caches.keys()) {
    if (key.startsWith(PREFIX) && key !== CACHE) await caches.delete(key);
  }
  await self.clients.claim();
})()));

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET" || new URL(request.url).origin !== location.origin) return;
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    try {
      const response = await fetch(request);
      if (response.ok) await cache.put(request, response.clone());
      return response;
    } catch (error) {
      const kept = await cache.match(request, { ignoreSearch: false });
      if (kept) return kept;
      throw error;
    }
  })());
});
