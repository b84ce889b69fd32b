import shutil
import fasttext
from test_datakit_quality import sources, _config  # noqa
from marin.processing.quality import quality_classifier_step

def test_dbg(sources, tmp_path, monkeypatch):
    orig = fasttext.train_supervised
    n = [0]
    def spy(**kw):
        n[0] += 1
        shutil.copy(kw['input'], f'/tmp/ft_train_pytest{n[0]}.txt'); print(kw)
        return orig(**kw)
    monkeypatch.setattr(fasttext, "train_supervised", spy)
    quality_classifier_step(_config(*sources), str(tmp_path / "m1"))
    quality_classifier_step(_config(*sources), str(tmp_path / "m2"))
