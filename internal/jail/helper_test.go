package jail_test

func helperMain() bool { return false }
