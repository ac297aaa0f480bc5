// googletest, as fmtlib/fmt's tests: built by CMake and run as SWE-bench
// runs fmt, `ctest --test-dir build -V -R calc-test`.
#include <gtest/gtest.h>
#include <stdexcept>

TEST(CalcTest, Adds) { EXPECT_EQ(4, 2 + 2); }              // passes
TEST(CalcTest, SubtractsWrongly) { EXPECT_EQ(1, 3 - 1); }  // fails
TEST(CalcTest, Throws) { throw std::runtime_error("boom"); } // errors: gtest reports FAILED
TEST(CalcTest, Skipped) { GTEST_SKIP() << "not here"; }     // skipped
TEST(CalcTest, DISABLED_Later) { EXPECT_TRUE(false); }      // disabled: not run

class ParamTest : public ::testing::TestWithParam<int> {};
TEST_P(ParamTest, IsEven) { EXPECT_EQ(0, GetParam() % 2); } // 2 passes, 3 fails
INSTANTIATE_TEST_SUITE_P(Nums, ParamTest, ::testing::Values(2, 3));
