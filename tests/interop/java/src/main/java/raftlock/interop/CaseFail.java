package raftlock.interop;

/** A check that did not hold; its message is the RESULT line's detail. */
final class CaseFail extends RuntimeException {
    private static final long serialVersionUID = 1L;

    CaseFail(String message) {
        super(message);
    }
}
