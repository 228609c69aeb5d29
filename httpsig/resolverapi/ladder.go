package resolverapi

import "github.com/kplug/kplug/httpsig"

// Ladder is the ladder a Metadata answer states, as httpsig uses it; nil for nil. It is
// not validated: call Validate on the result.
func (kd *KeyDerivation) Ladder() *httpsig.Ladder {
	if kd == nil {
		return nil
	}
	l := &httpsig.Ladder{Kind: kd.GetKind(), Hash: kd.GetHash(), SecretPrefix: kd.GetSecretPrefix()}
	for _, s := range kd.GetSteps() {
		l.Steps = append(l.Steps, httpsig.LadderStep{Name: s.GetName(), Literal: s.GetLiteral(), Scope: s.GetScope(), Date: s.GetDate()})
	}
	return l
}

// KeyDerivationOf is l as a Metadata answer states it; nil for nil.
func KeyDerivationOf(l *httpsig.Ladder) *KeyDerivation {
	if l == nil {
		return nil
	}
	kd := &KeyDerivation{Kind: l.Kind, Hash: l.Hash, SecretPrefix: l.SecretPrefix}
	for _, s := range l.Steps {
		kd.Steps = append(kd.Steps, &KeyDerivationStep{Name: s.Name, Literal: s.Literal, Scope: s.Scope, Date: s.Date})
	}
	return kd
}
