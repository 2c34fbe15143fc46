package posixtest

// cases lists the suite, group by group, in the order doc.go describes.
func (s *suite) cases() []Case {
	var all []Case
	for _, group := range [][]Case{
		s.fileCases(),
		s.dirCases(),
		s.dirStreamCases(),
		s.symlinkCases(),
		s.linkCases(),
		s.renameCases(),
		s.unlinkCases(),
		s.sizeCases(),
		s.attrCases(),
		s.xattrCases(),
		s.specialCases(),
		s.mmapCases(),
		s.fsCases(),
		s.inodeCases(),
		s.permCases(),
		s.umaskCases(),
		s.nameCases(),
		s.setidCases(),
	} {
		all = append(all, group...)
	}
	return all
}
