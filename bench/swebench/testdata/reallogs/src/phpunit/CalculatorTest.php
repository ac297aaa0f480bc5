<?php
// Tests with known outcomes, run with
// `phpunit --testdox --colors=never CalculatorTest.php` as SWE-bench's
// PHP specs run them.
namespace Calc\Tests;

use PHPUnit\Framework\TestCase;

final class CalculatorTest extends TestCase
{
    public function testAddsTwoNumbers(): void        // passes
    {
        $this->assertSame(4, 2 + 2);
    }

    public function testSubtractsWrongly(): void      // fails
    {
        $this->assertSame(1, 3 - 1);
    }

    public function testDividesByZero(): void         // errors (uncaught exception)
    {
        throw new \RuntimeException('boom');
    }

    public function testNeedsAnExtension(): void      // skipped
    {
        $this->markTestSkipped('not on this machine');
    }

    public function testIsNotWrittenYet(): void       // incomplete
    {
        $this->markTestIncomplete('later');
    }

    /** @dataProvider pairs */
    public function testMultiplies(int $a, int $b, int $want): void // 1st set passes, 2nd fails
    {
        $this->assertSame($want, $a * $b);
    }

    public static function pairs(): array
    {
        return ['small' => [2, 3, 6], 'wrong' => [2, 2, 5]];
    }
}
