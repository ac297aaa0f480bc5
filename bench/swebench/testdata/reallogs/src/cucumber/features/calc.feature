Feature: Calculator

  Scenario: adding
    Given the number 2
    When I add 2
    Then the result is 4

  Scenario: subtracting wrongly
    Given the number 3
    When I subtract 1
    Then the result is 1

  Scenario: an undefined step
    Given the number 1
    When I take the square root
