module github.com/suanli/suanli/bench/flood

go 1.26.0
