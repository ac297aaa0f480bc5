// mocha, run as SWE-bench runs axios: npx mocha http.js -R tap -g 'compression'
const assert = require('assert');

describe('supports http with nodejs', function () {
  describe('compression', function () {
    it('should decompress gzip', function () { assert.strictEqual(2 + 2, 4); });       // passes
    it('should decompress brotli', function () { assert.strictEqual(3 - 1, 1); });     // fails
    it('should throw on a bad stream', function () { throw new Error('boom'); });     // errors: mocha calls it failed
    it.skip('should decompress zstd', function () {});                                 // skipped
    it('should handle pending');                                                       // pending (no body)
  });
  it('should not run outside the grep', function () { assert.ok(true); });            // filtered out by -g
});
