// mocha tests run in Chrome by karma.
function eq(a, b) { if (a !== b) throw new Error(a + ' !== ' + b); }

describe('render()', () => {
	it('should render a div', () => { eq(2 + 2, 4); });          // passes
	it('should render wrongly', () => { eq(3 - 1, 1); });        // fails
	it.skip('should render later', () => { eq(1, 2); });         // skipped
	describe('with children', () => {
		it('should render them', () => { eq(1, 1); });           // passes
		it('should throw', () => { null.x; });                   // errors: mocha calls it failed
	});
	it('should render after the block', () => { eq(1, 1); });    // passes
});
