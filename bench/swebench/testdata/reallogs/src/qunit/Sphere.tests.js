// QUnit, run as SWE-bench runs three.js: npx qunit Sphere.tests.js
QUnit.module('Maths', () => {
  QUnit.module('Sphere', () => {
    QUnit.test('Instancing', (assert) => { assert.ok(true); });             // passes
    QUnit.test('union', (assert) => { assert.strictEqual(3 - 1, 1); });     // fails
    QUnit.test('throws', () => { throw new Error('boom'); });               // errors: QUnit calls it failed
    QUnit.skip('applyMatrix4', (assert) => { assert.ok(false); });          // skipped
    QUnit.todo('expandByPoint', (assert) => { assert.ok(false); });         // todo (expected to fail)
  });
});
