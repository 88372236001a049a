//! Inception-V3 (torchvision, eval mode: no auxiliary head, no input transform) as exported
//! with BatchNorm folded: 94 `Conv` each followed by `Relu`, 11 `Concat`, 9 `AveragePool`
//! (`count_include_pad=1`), 4 `MaxPool`, `GlobalAveragePool`, `Flatten`, `Gemm`. The
//! asymmetric 1×7 / 7×1 / 1×3 / 3×1 convolutions pad per axis.

use hidet_graph::{Attribute, DType, Graph};

use super::net::{attrs, ConvSpec, Net, RELU_GAIN};
use super::{ZooError, SEED};

/// Inception-V3 for one 299×299 image.
pub fn build() -> Result<Graph, ZooError> {
    build_for(299)
}

/// Inception-V3 for one `size`×`size` image (size ≥ 75).
pub fn build_for(size: usize) -> Result<Graph, ZooError> {
    let mut m = Model {
        net: Net::new("inception_v3", SEED),
    };
    let x = m.net.input("input", DType::F32, &[1, 3, size, size]);
    let h = m.conv("Conv2d_1a_3x3", &x, 3, ConvSpec::square(32, 3, 2, 0))?;
    let h = m.conv("Conv2d_2a_3x3", &h, 32, ConvSpec::square(32, 3, 1, 0))?;
    let h = m.conv("Conv2d_2b_3x3", &h, 32, ConvSpec::square(64, 3, 1, 1))?;
    let h = m.net.pool("maxpool1", "MaxPool", &h, 3, 2, 0);
    let h = m.conv("Conv2d_3b_1x1", &h, 64, ConvSpec::square(80, 1, 1, 0))?;
    let h = m.conv("Conv2d_4a_3x3", &h, 80, ConvSpec::square(192, 3, 1, 0))?;
    let h = m.net.pool("maxpool2", "MaxPool", &h, 3, 2, 0);
    let h = m.inception_a("Mixed_5b", &h, 192, 32)?;
    let h = m.inception_a("Mixed_5c", &h, 256, 64)?;
    let h = m.inception_a("Mixed_5d", &h, 288, 64)?;
    let h = m.inception_b("Mixed_6a", &h, 288)?;
    let h = m.inception_c("Mixed_6b", &h, 128)?;
    let h = m.inception_c("Mixed_6c", &h, 160)?;
    let h = m.inception_c("Mixed_6d", &h, 160)?;
    let h = m.inception_c("Mixed_6e", &h, 192)?;
    let h = m.inception_d("Mixed_7a", &h)?;
    let h = m.inception_e("Mixed_7b", &h, 1280)?;
    let h = m.inception_e("Mixed_7c", &h, 2048)?;
    let logits = m.net.classifier(&h, 2048, 1000)?;
    m.net.finish("inception_v3", &[&logits])
}

struct Model {
    net: Net,
}

impl Model {
    /// torchvision's `BasicConv2d` with its BatchNorm folded: `Conv` (with bias) + `Relu`.
    fn conv(&mut self, name: &str, x: &str, cin: usize, s: ConvSpec) -> Result<String, ZooError> {
        let c = self.net.conv(name, x, cin, s, RELU_GAIN)?;
        Ok(self.net.relu(&c))
    }

    fn concat(&mut self, name: &str, parts: &[&str]) -> String {
        self.net.op(
            name,
            "Concat",
            parts,
            attrs(vec![("axis", Attribute::Int(1))]),
        )
    }

    fn avg_pool(&mut self, name: &str, x: &str) -> String {
        self.net.pool(name, "AveragePool", x, 3, 1, 1)
    }

    /// 64 + 64 + 96 + `pool_features` channels.
    fn inception_a(
        &mut self,
        n: &str,
        x: &str,
        cin: usize,
        pool_features: usize,
    ) -> Result<String, ZooError> {
        let b1 = self.conv(
            &format!("{n}.branch1x1"),
            x,
            cin,
            ConvSpec::square(64, 1, 1, 0),
        )?;
        let b5 = self.conv(
            &format!("{n}.branch5x5_1"),
            x,
            cin,
            ConvSpec::square(48, 1, 1, 0),
        )?;
        let b5 = self.conv(
            &format!("{n}.branch5x5_2"),
            &b5,
            48,
            ConvSpec::square(64, 5, 1, 2),
        )?;
        let b3 = self.conv(
            &format!("{n}.branch3x3dbl_1"),
            x,
            cin,
            ConvSpec::square(64, 1, 1, 0),
        )?;
        let b3 = self.conv(
            &format!("{n}.branch3x3dbl_2"),
            &b3,
            64,
            ConvSpec::square(96, 3, 1, 1),
        )?;
        let b3 = self.conv(
            &format!("{n}.branch3x3dbl_3"),
            &b3,
            96,
            ConvSpec::square(96, 3, 1, 1),
        )?;
        let bp = self.avg_pool(&format!("{n}.avg_pool"), x);
        let bp = self.conv(
            &format!("{n}.branch_pool"),
            &bp,
            cin,
            ConvSpec::square(pool_features, 1, 1, 0),
        )?;
        Ok(self.concat(&format!("{n}.concat"), &[&b1, &b5, &b3, &bp]))
    }

    /// 384 + 96 + `cin` channels, spatial size halved.
    fn inception_b(&mut self, n: &str, x: &str, cin: usize) -> Result<String, ZooError> {
        let b3 = self.conv(
            &format!("{n}.branch3x3"),
            x,
            cin,
            ConvSpec::square(384, 3, 2, 0),
        )?;
        let bd = self.conv(
            &format!("{n}.branch3x3dbl_1"),
            x,
            cin,
            ConvSpec::square(64, 1, 1, 0),
        )?;
        let bd = self.conv(
            &format!("{n}.branch3x3dbl_2"),
            &bd,
            64,
            ConvSpec::square(96, 3, 1, 1),
        )?;
        let bd = self.conv(
            &format!("{n}.branch3x3dbl_3"),
            &bd,
            96,
            ConvSpec::square(96, 3, 2, 0),
        )?;
        let bp = self
            .net
            .pool(&format!("{n}.max_pool"), "MaxPool", x, 3, 2, 0);
        Ok(self.concat(&format!("{n}.concat"), &[&b3, &bd, &bp]))
    }

    /// 768 channels in and out; `c7` channels inside the factorized 7×7 branches.
    fn inception_c(&mut self, n: &str, x: &str, c7: usize) -> Result<String, ZooError> {
        let cin = 768;
        let b1 = self.conv(
            &format!("{n}.branch1x1"),
            x,
            cin,
            ConvSpec::square(192, 1, 1, 0),
        )?;
        let b7 = self.conv(
            &format!("{n}.branch7x7_1"),
            x,
            cin,
            ConvSpec::square(c7, 1, 1, 0),
        )?;
        let b7 = self.conv(
            &format!("{n}.branch7x7_2"),
            &b7,
            c7,
            ConvSpec::rect(c7, 1, 7, 0, 3),
        )?;
        let b7 = self.conv(
            &format!("{n}.branch7x7_3"),
            &b7,
            c7,
            ConvSpec::rect(192, 7, 1, 3, 0),
        )?;
        let bd = self.conv(
            &format!("{n}.branch7x7dbl_1"),
            x,
            cin,
            ConvSpec::square(c7, 1, 1, 0),
        )?;
        let bd = self.conv(
            &format!("{n}.branch7x7dbl_2"),
            &bd,
            c7,
            ConvSpec::rect(c7, 7, 1, 3, 0),
        )?;
        let bd = self.conv(
            &format!("{n}.branch7x7dbl_3"),
            &bd,
            c7,
            ConvSpec::rect(c7, 1, 7, 0, 3),
        )?;
        let bd = self.conv(
            &format!("{n}.branch7x7dbl_4"),
            &bd,
            c7,
            ConvSpec::rect(c7, 7, 1, 3, 0),
        )?;
        let bd = self.conv(
            &format!("{n}.branch7x7dbl_5"),
            &bd,
            c7,
            ConvSpec::rect(192, 1, 7, 0, 3),
        )?;
        let bp = self.avg_pool(&format!("{n}.avg_pool"), x);
        let bp = self.conv(
            &format!("{n}.branch_pool"),
            &bp,
            cin,
            ConvSpec::square(192, 1, 1, 0),
        )?;
        Ok(self.concat(&format!("{n}.concat"), &[&b1, &b7, &bd, &bp]))
    }

    /// 768 → 320 + 192 + 768 = 1280 channels, spatial size halved.
    fn inception_d(&mut self, n: &str, x: &str) -> Result<String, ZooError> {
        let cin = 768;
        let b3 = self.conv(
            &format!("{n}.branch3x3_1"),
            x,
            cin,
            ConvSpec::square(192, 1, 1, 0),
        )?;
        let b3 = self.conv(
            &format!("{n}.branch3x3_2"),
            &b3,
            192,
            ConvSpec::square(320, 3, 2, 0),
        )?;
        let b7 = self.conv(
            &format!("{n}.branch7x7x3_1"),
            x,
            cin,
            ConvSpec::square(192, 1, 1, 0),
        )?;
        let b7 = self.conv(
            &format!("{n}.branch7x7x3_2"),
            &b7,
            192,
            ConvSpec::rect(192, 1, 7, 0, 3),
        )?;
        let b7 = self.conv(
            &format!("{n}.branch7x7x3_3"),
            &b7,
            192,
            ConvSpec::rect(192, 7, 1, 3, 0),
        )?;
        let b7 = self.conv(
            &format!("{n}.branch7x7x3_4"),
            &b7,
            192,
            ConvSpec::square(192, 3, 2, 0),
        )?;
        let bp = self
            .net
            .pool(&format!("{n}.max_pool"), "MaxPool", x, 3, 2, 0);
        Ok(self.concat(&format!("{n}.concat"), &[&b3, &b7, &bp]))
    }

    /// 320 + 2·384 + 2·384 + 192 = 2048 channels; the exporter flattens the two inner
    /// concatenations into one six-input `Concat`.
    fn inception_e(&mut self, n: &str, x: &str, cin: usize) -> Result<String, ZooError> {
        let b1 = self.conv(
            &format!("{n}.branch1x1"),
            x,
            cin,
            ConvSpec::square(320, 1, 1, 0),
        )?;
        let b3 = self.conv(
            &format!("{n}.branch3x3_1"),
            x,
            cin,
            ConvSpec::square(384, 1, 1, 0),
        )?;
        let b3a = self.conv(
            &format!("{n}.branch3x3_2a"),
            &b3,
            384,
            ConvSpec::rect(384, 1, 3, 0, 1),
        )?;
        let b3b = self.conv(
            &format!("{n}.branch3x3_2b"),
            &b3,
            384,
            ConvSpec::rect(384, 3, 1, 1, 0),
        )?;
        let bd = self.conv(
            &format!("{n}.branch3x3dbl_1"),
            x,
            cin,
            ConvSpec::square(448, 1, 1, 0),
        )?;
        let bd = self.conv(
            &format!("{n}.branch3x3dbl_2"),
            &bd,
            448,
            ConvSpec::square(384, 3, 1, 1),
        )?;
        let bda = self.conv(
            &format!("{n}.branch3x3dbl_3a"),
            &bd,
            384,
            ConvSpec::rect(384, 1, 3, 0, 1),
        )?;
        let bdb = self.conv(
            &format!("{n}.branch3x3dbl_3b"),
            &bd,
            384,
            ConvSpec::rect(384, 3, 1, 1, 0),
        )?;
        let bp = self.avg_pool(&format!("{n}.avg_pool"), x);
        let bp = self.conv(
            &format!("{n}.branch_pool"),
            &bp,
            cin,
            ConvSpec::square(192, 1, 1, 0),
        )?;
        Ok(self.concat(&format!("{n}.concat"), &[&b1, &b3a, &b3b, &bda, &bdb, &bp]))
    }
}
