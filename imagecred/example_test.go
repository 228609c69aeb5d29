package imagecred_test

import (
	"fmt"

	"github.com/kplug/kplug/imagecred"
)

// Providers see the normalised repository, and matchImages patterns match it label by label.
func ExampleMatchImage() {
	image, _ := imagecred.NormalizeImage("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/app:v1")
	fmt.Println(image)
	for _, pattern := range []string{"*.dkr.ecr.*.amazonaws.com", "*.amazonaws.com", "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team"} {
		ok, _ := imagecred.MatchImage(pattern, image)
		fmt.Println(pattern, ok)
	}
	// Output:
	// 123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/app
	// *.dkr.ecr.*.amazonaws.com true
	// *.amazonaws.com false
	// 123456789012.dkr.ecr.eu-west-1.amazonaws.com/team true
}
