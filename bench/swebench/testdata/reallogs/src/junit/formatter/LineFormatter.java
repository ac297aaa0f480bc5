// A result formatter that prints one "[PASS|FAIL|ERR] <test>" line a
// test, the line shape of lombok.ant.SimpleTestFormatter, which lombok's
// SWE-bench target (`ant test.instance`) uses and which is not packaged in
// Debian. Written for this fixture; Ant prefixes each line with "[junit]".
import java.io.OutputStream;
import java.io.PrintStream;

import junit.framework.AssertionFailedError;
import junit.framework.Test;

import org.apache.tools.ant.taskdefs.optional.junit.JUnitResultFormatter;
import org.apache.tools.ant.taskdefs.optional.junit.JUnitTest;

public class LineFormatter implements JUnitResultFormatter {
    private PrintStream out = System.out;
    private Test marked;

    private void line(Test test, String result) {
        out.println("[" + result + "] " + test);
        out.flush();
    }

    @Override public void addError(Test test, Throwable t) { marked = test; line(test, "ERR"); out.println("  " + t); }
    @Override public void addFailure(Test test, AssertionFailedError f) { marked = test; line(test, "FAIL"); out.println(f.getMessage()); }
    @Override public void endTest(Test test) { if (test != marked) line(test, "PASS"); }
    @Override public void startTest(Test test) {}
    @Override public void startTestSuite(JUnitTest suite) {}
    @Override public void endTestSuite(JUnitTest suite) {}
    @Override public void setOutput(OutputStream o) { out = new PrintStream(o); }
    @Override public void setSystemOutput(String s) {}
    @Override public void setSystemError(String s) {}
}
