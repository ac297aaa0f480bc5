// doctest, as nlohmann/json's unit tests; the harness runs the test
// binary with -s -r=xml (parse_log_doctest reads the XML report).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <stdexcept>

TEST_CASE("arithmetic") {
    SUBCASE("adds") { CHECK(2 + 2 == 4); }                 // passes
    SUBCASE("subtracts wrongly") { CHECK(3 - 1 == 1); }    // fails
    SUBCASE("nested") {
        SUBCASE("inner ok") { CHECK(1 == 1); }             // passes
        SUBCASE("inner bad") { CHECK(1 == 2); }            // fails
    }
}

TEST_CASE("throws") {
    SUBCASE("uncaught") { throw std::runtime_error("boom"); } // errors
}

TEST_CASE("skipped" * doctest::skip()) {                   // skipped
    SUBCASE("never") { CHECK(false); }
}
